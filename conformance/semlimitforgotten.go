package conformance

import (
	"context"
	"errors"
	"fmt"

	"github.com/golocker/locker"
)

// limitForgotten is the contract of SetLimitForgotten.
const limitForgotten = "a limit set by SetLimit lasts only while the key has holders or waiters: after the last holder left or crashed, the next holder's limit rules"

// testSetLimitForgotten raises the limit of a semaphore with one holder,
// then lets that holder go, once by Unlock and once by a crash, and checks
// that a Semaphore with a third limit gets exactly its own number of
// permits: the raised limit must neither refuse it nor rule it.
func testSetLimitForgotten(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a holder")
	const first, raised, next = 2, 4, 3
	ctx := c.ctx(c.within(5))
	for _, how := range []string{"released", "crashed"} {
		key := c.key()
		a, b := c.newLocker(), c.newLocker()
		sa := c.semaphore(a, key, first)
		p, err := sa.TryAcquire(ctx)
		if err != nil {
			c.Fatalf("%s: TryAcquire on a free semaphore: %v", limitForgotten, err)
		}
		if err := sa.SetLimit(ctx, raised); errors.Is(err, errors.ErrUnsupported) {
			c.Skipf("the Locker cannot change a semaphore's limit: %v", err)
		} else if err != nil {
			c.Fatalf("%s: SetLimit(%d) of a held semaphore: %v", limitForgotten, raised, err)
		}
		if how == "crashed" {
			c.h.Crash(c.t, a)
		} else {
			c.unlock(ctx, p, limitForgotten)
		}

		// Until the crashed holder's permit expires, the key is still a
		// semaphore of the raised limit: a refusal naming both limits is
		// right then, and wrong once the permit is gone.
		sb := c.semaphore(b, key, next)
		wctx, cancel := context.WithTimeout(ctx, c.within(1))
		got, err := pollTry(wctx, c.every(), func(ctx context.Context, opts ...locker.LockOption) (locker.Lock, error) {
			p, err := sb.TryAcquire(ctx, opts...)
			if errors.Is(err, locker.ErrInvalidOption) && how == "crashed" {
				err = fmt.Errorf("%w: %w", locker.ErrNotAcquired, err)
			}
			return p, err
		})
		cancel()
		if err != nil {
			c.Fatalf("%s: the only holder of a semaphore whose limit was set to %d %s; then a Semaphore of %d: %v", limitForgotten, raised, how, next, err)
		}
		held := []locker.Lock{got}
		for len(held) < next {
			p, err := sb.TryAcquire(ctx)
			if err != nil {
				c.Errorf("%s: the only holder of a semaphore whose limit was set to %d %s; then permit %d of a Semaphore of %d: %v", limitForgotten, raised, how, len(held)+1, next, err)
				break
			}
			held = append(held, p)
		}
		if len(held) == next {
			switch p, err := sb.TryAcquire(ctx); {
			case err == nil:
				c.Errorf("%s: the only holder of a semaphore whose limit was set to %d %s; then a Semaphore of %d was granted permit %d (token %d)", limitForgotten, raised, how, next, next+1, p.Token())
				held = append(held, p)
			case !errors.Is(err, locker.ErrNotAcquired):
				c.Errorf("%s: permit %d of a Semaphore of %d: want an error matching ErrNotAcquired, got %v", limitForgotten, next+1, next, err)
			}
			if st, err := locker.Inspect(ctx, b, key); err != nil {
				c.Errorf("Inspect of a semaphore: %v", err)
			} else if st.Limit != next {
				c.Errorf("%s: the only holder of a semaphore whose limit was set to %d %s; with every permit of a Semaphore of %d held, Inspect shows the limit %d", limitForgotten, raised, how, next, st.Limit)
			}
		}
		for _, p := range held {
			c.unlock(ctx, p, limitForgotten)
		}
	}
}
