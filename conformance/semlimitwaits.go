package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golocker/locker"
)

// limitWaitsGone is the contract of SetLimitWaiters.
const limitWaitsGone = "waits with a semaphore's old limit fail once SetLimit changed it, naming the new one, and leave no place in line behind when they return"

// testSetLimitWaiters queues waits with a semaphore's old limit behind the
// holder of every permit and lowers the limit. The waits must fail naming
// the new limit, and what they left in line must be gone when they return:
// Inspect counts no waiter, and a wait with the new limit for every permit
// is granted as soon as the holder gives them back. The old waits ask for
// a TTL of several of the Locker's where the Locker takes one, so that a
// place in line left for the store to expire outlasts the case's deadline.
func testSetLimitWaiters(c *caseT) {
	const old, lowered, waits = 17, 15, 3
	ctx := c.ctx(c.within(4))
	soon := max(c.h.TTL/2, c.every())
	a, b, d := c.newLocker(), c.newLocker(), c.newLocker()
	key := c.key()
	sa, sb, sd := c.semaphore(a, key, old), c.semaphore(b, key, old), c.semaphore(d, key, lowered)
	held, err := sa.TryAcquireN(ctx, old)
	if err != nil {
		c.Fatalf("%s: TryAcquireN(%d) of a free semaphore of %d: %v", limitWaitsGone, old, old, err)
	}
	c.t.Cleanup(func() { _ = held.Unlock(context.WithoutCancel(ctx)) })
	if err := sa.SetLimit(ctx, old); errors.Is(err, errors.ErrUnsupported) {
		c.Skipf("the Locker cannot change a semaphore's limit: %v", err)
	} else if err != nil {
		c.Fatalf("%s: SetLimit(%d) of a semaphore of %d: %v", limitWaitsGone, old, old, err)
	}
	var opts []locker.LockOption
	if long := []locker.LockOption{locker.TTL(4 * c.h.TTL)}; locker.CheckLockOptions(b, long...) == nil {
		opts = long
	}

	errs := make(chan error, waits)
	for range waits {
		go func() {
			p, err := sb.Acquire(ctx, opts...)
			if err == nil {
				_ = p.Unlock(context.WithoutCancel(ctx))
				err = fmt.Errorf("Acquire got a permit (token %d) while every permit was held", p.Token())
			}
			errs <- err
		}()
	}
	c.lineUp(ctx, a, key, waits)
	if err := sa.SetLimit(ctx, lowered); err != nil {
		c.Fatalf("%s: SetLimit(%d) of a held semaphore of %d: %v", limitWaitsGone, lowered, old, err)
	}
	for range waits {
		var err error
		select {
		case err = <-errs:
		case <-ctx.Done():
			c.Fatalf("%s: a wait with the old limit %d still waits after SetLimit(%d)", limitWaitsGone, old, lowered)
		}
		msg := ""
		if err != nil {
			msg = strings.ReplaceAll(err.Error(), key, "")
		}
		switch {
		case !errors.Is(err, locker.ErrInvalidOption):
			c.Errorf("%s: a wait with the old limit %d after SetLimit(%d): want an error matching ErrInvalidOption, got %v", limitWaitsGone, old, lowered, err)
		case !strings.Contains(msg, strconv.Itoa(lowered)):
			c.Errorf("%s: the failure of a wait with the old limit %d does not name the new limit %d: %v", limitWaitsGone, old, lowered, err)
		}
	}
	c.noWaiters(ctx, a, key, "right after the waits with the old limit failed")

	// A wait with the new limit, for every permit, behind nothing.
	got := make(chan error, 1)
	go func() {
		p, err := sd.AcquireN(ctx, lowered)
		if err == nil {
			_ = p.Unlock(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	c.lineUp(ctx, a, key, 1)
	c.unlock(ctx, held, limitWaitsGone)
	timer := time.NewTimer(soon)
	defer timer.Stop()
	select {
	case err := <-got:
		if err != nil {
			c.Errorf("%s: a wait with the new limit %d for every permit, once the holder gave them back: %v", limitWaitsGone, lowered, err)
		}
	case <-timer.C:
		c.Errorf("%s: a wait with the new limit %d for every permit was not granted within %v of the holder's Unlock", limitWaitsGone, lowered, soon)
		<-got
	}
	c.noWaiters(ctx, a, key, "once the wait with the new limit was granted")
}

// lineUp gives n waits on key time to line up: until Inspect through l
// counts n waiters, or for a pause where it counts none.
func (c *caseT) lineUp(ctx context.Context, l locker.Locker, key string, n int) {
	c.Helper()
	end := time.Now().Add(4 * c.pause())
	for time.Now().Before(end) {
		st, err := locker.Inspect(ctx, l, key)
		if err == nil && st.Waiters >= n {
			return
		}
		if !sleep(ctx, c.every()) {
			return
		}
	}
}

// noWaiters checks that Inspect through l counts no waiter on key, where
// the Locker can inspect.
func (c *caseT) noWaiters(ctx context.Context, l locker.Locker, key, when string) {
	c.Helper()
	st, err := locker.Inspect(ctx, l, key)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
	case err != nil:
		c.Errorf("%s: Inspect %s: %v", limitWaitsGone, when, err)
	case st.Waiters > 0:
		c.Errorf("%s: Inspect counts %d waiters %s", limitWaitsGone, st.Waiters, when)
	}
}
