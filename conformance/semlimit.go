package conformance

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/golocker/locker"
)

// limitChanged is the contract of SemaphoreSetLimit.
const limitChanged = "after SetLimit the store holds the semaphore to the new limit, and a Semaphore with another limit fails naming both"

// testSemaphoreSetLimit holds every permit of a semaphore, raises its limit,
// takes the new permits, checks that no more fit and that a Semaphore with
// the old limit is refused naming both limits; then lowers the limit below
// the permits in use and checks that a grant waits until the holders fit.
func testSemaphoreSetLimit(c *caseT) {
	const old, raised, lowered = 12, 14, 13
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()
	sa := c.semaphore(a, key, old)
	sb := c.semaphore(b, key, old)
	grant := func(s *locker.Semaphore, n int, what string) locker.Lock {
		c.Helper()
		p, err := s.TryAcquireN(ctx, n)
		if err != nil {
			c.Fatalf("%s: TryAcquireN(%d) %s: %v", limitChanged, n, what, err)
		}
		c.t.Cleanup(func() { _ = p.Unlock(context.WithoutCancel(ctx)) })
		return p
	}
	refuse := func(s *locker.Semaphore, n int, what string) {
		c.Helper()
		p, err := s.TryAcquireN(ctx, n)
		switch {
		case err == nil:
			c.Errorf("%s: TryAcquireN(%d) %s was granted (token %d)", limitChanged, n, what, p.Token())
			_ = p.Unlock(context.WithoutCancel(ctx))
		case !errors.Is(err, locker.ErrNotAcquired):
			c.Errorf("%s: TryAcquireN(%d) %s: want an error matching ErrNotAcquired, got %v", limitChanged, n, what, err)
		}
	}
	full := grant(sb, old, "on a free semaphore")

	if err := sa.SetLimit(ctx, raised); errors.Is(err, errors.ErrUnsupported) {
		c.Skipf("the Locker cannot change a semaphore's limit: %v", err)
	} else if err != nil {
		c.Fatalf("%s: SetLimit(%d) of a held semaphore: %v", limitChanged, raised, err)
	}
	if sa.Limit() != raised {
		c.Errorf("%s: Limit() is %d after SetLimit(%d)", limitChanged, sa.Limit(), raised)
	}
	extra := grant(sa, raised-old, "after the limit was raised to cover it")
	refuse(sa, 1, "with every permit of the raised limit held")

	// sb still asks with the old limit.
	_, err := sb.TryAcquire(ctx)
	msg := ""
	if err != nil {
		msg = strings.ReplaceAll(err.Error(), key, "")
	}
	switch {
	case err == nil:
		c.Errorf("%s: a Semaphore of %d permits was granted on a key whose limit was set to %d", limitChanged, old, raised)
	case !errors.Is(err, locker.ErrInvalidOption):
		c.Errorf("%s: a Semaphore of %d permits on a key whose limit was set to %d: want an error matching ErrInvalidOption, got %v", limitChanged, old, raised, err)
	case !strings.Contains(msg, strconv.Itoa(old)) || !strings.Contains(msg, strconv.Itoa(raised)):
		c.Errorf("%s: the refusal of a Semaphore of %d permits on a key of %d does not name both: %v", limitChanged, old, raised, err)
	}

	// Lowered below the permits in use: the holders keep them, and a
	// grant fits only once they are below the new limit.
	if err := sa.SetLimit(ctx, lowered); err != nil {
		c.Fatalf("%s: SetLimit(%d) of a held semaphore: %v", limitChanged, lowered, err)
	}
	refuse(sa, 1, "with more permits held than the lowered limit")
	c.unlock(ctx, extra, limitChanged)
	grant(sa, lowered-old, "once the holders fit the lowered limit")
	refuse(sa, 1, "with every permit of the lowered limit held")
	c.unlock(ctx, full, limitChanged)

	// Bad input, and keys that are no semaphore.
	if err := sa.SetLimit(ctx, 0); !errors.Is(err, locker.ErrInvalidOption) {
		c.Errorf("%s: SetLimit(0): want an error matching ErrInvalidOption, got %v", limitChanged, err)
	}
	rw := c.rwmutex(a, key+"-rw")
	r, err := rw.TryRLock(ctx)
	if err != nil {
		c.Fatalf("%s: TryRLock of a free key: %v", limitChanged, err)
	}
	if err := locker.SetLimit(ctx, b, key+"-rw", 3); !errors.Is(err, locker.ErrInvalidOption) {
		c.Errorf("%s: SetLimit of a read-write lock's key: want an error matching ErrInvalidOption, got %v", limitChanged, err)
	}
	c.unlock(ctx, r, limitChanged)
}
