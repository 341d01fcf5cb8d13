package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

func testDo(c *caseT) {
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	lb := c.mustTryLock(ctx, b, key, "TryLock on a free key must succeed")
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	if err := locker.TryDo(ctx, a, key, fn); !errors.Is(err, locker.ErrNotAcquired) {
		c.Errorf("TryDo on a key held elsewhere must return an error matching ErrNotAcquired: got %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := locker.Do(wctx, a, key, fn)
	cancel()
	if !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		c.Errorf("Do whose ctx ends while the key is held elsewhere must return an error matching ErrNotAcquired and ctx.Err(): got %v", err)
	}
	if ran {
		c.Errorf("TryDo and Do must not run their function when they did not get the key")
	}
	c.unlock(ctx, lb, heldUntil)
	// A Do whose wait ended must leave nothing behind that takes the key
	// later: give such a waiter time to act, then the key must be free.
	sleep(ctx, c.pause())
	c.unlock(ctx, c.mustTryLock(ctx, b, key, "a Do whose ctx ended while waiting must leave no waiter behind: after the holder released, the key must be free"), heldUntil)

	errFn := errors.New("conformance: the function's own error")
	ran = false
	err = locker.Do(ctx, a, key, func(fctx context.Context) error {
		ran = true
		c.refused(ctx, b, key, "Do must hold the key while its function runs")
		if err := fctx.Err(); err != nil {
			c.Errorf("the ctx Do passes to its function must not be done while the lock is held: %v", err)
		}
		return errFn
	})
	if !ran {
		c.Fatalf("Do must run its function on a free key: %v", err)
	}
	if !errors.Is(err, errFn) {
		c.Errorf("%s: Do returned %v, want its function's error", c.contract, err)
	}
	lk, err := b.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("Do must release the key when its function returned: TryLock from another Locker: %v", err)
	}
	c.unlock(ctx, lk, heldUntil)

	ran = false
	err = locker.TryDo(ctx, a, key, func(fctx context.Context) error {
		ran = true
		c.refused(ctx, b, key, "TryDo must hold the key while its function runs")
		return nil
	})
	if err != nil || !ran {
		c.Errorf("TryDo on a free key must run its function and return its result (nil): got %v, ran %v", err, ran)
	}
	lk, err = b.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("TryDo must release the key when its function returned: TryLock from another Locker: %v", err)
	}
	c.unlock(ctx, lk, heldUntil)

	if c.h.DeleteBehind != nil {
		// The lock vanishes while the function runs, before any renewal
		// could tell its Locker: Do's release finds it gone.
		err = locker.Do(ctx, a, key, func(context.Context) error {
			c.h.DeleteBehind(c.t, key)
			return nil
		})
		if !errors.Is(err, locker.ErrLost) {
			c.Errorf("Do whose lock vanished from the store while its function ran must return an error matching ErrLost (the function's work may not have been exclusive): got %v", err)
		}
	}
}
