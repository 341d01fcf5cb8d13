package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

func testReentrancy(c *caseT) {
	ctx := c.ctx(c.within(6))
	key := c.key()
	a, other := c.newLocker(), c.newLocker()
	// bound caps the calls that must return at once, so that a Locker that
	// makes them wait fails the case instead of hanging it.
	bound := c.h.TTL + c.slack/2
	const nested = "inside the ctx Do passes to its function, Lock, TryLock and Do on the same key through the same Locker must return a nested hold at once"
	const noRelease = "releasing a nested hold must not release the lock: only the outermost Do's release does"
	const contender = "outside Do's ctx, the same Locker must wait for a key it holds like any other contender"

	ran1, ran2 := false, false
	err := locker.Do(ctx, a, key, func(ctx1 context.Context) error {
		ran1 = true
		c.refused(ctx, other, key, "Do must hold the key while its function runs")

		lctx, cancel := context.WithTimeout(ctx1, bound)
		l1, err := a.Lock(lctx, key)
		cancel()
		if err != nil {
			c.Errorf("%s: Lock: %v", nested, err)
			return nil
		}
		if l1.Key() != key || l1.Token() == 0 {
			c.Errorf("%s: the nested hold has key %s and token %d", nested, short(l1.Key()), l1.Token())
		}

		dctx, dcancel := context.WithTimeout(ctx1, bound)
		defer dcancel()
		err = locker.Do(dctx, a, key, func(ctx2 context.Context) error {
			ran2 = true
			tctx, cancel := context.WithTimeout(ctx2, bound)
			defer cancel()
			l2, err := a.TryLock(tctx, key)
			if err != nil {
				c.Errorf("%s: TryLock, three deep: %v", nested, err)
				return nil
			}
			if l2.Token() != l1.Token() {
				c.Errorf("%s: a nested hold must carry the outer lock's token: got %d and %d", nested, l2.Token(), l1.Token())
			}
			if err := l2.Unlock(ctx); err != nil {
				c.Errorf("%s: the nested hold's Unlock: %v", noRelease, err)
			}
			c.refused(ctx, other, key, noRelease+" (after the innermost Unlock)")
			c.held(l1, noRelease)
			return nil
		})
		if err != nil {
			c.Errorf("%s: the nested Do returned %v, want its function's nil", nested, err)
		}
		if !ran2 {
			c.Errorf("%s: the nested Do did not run its function", nested)
		}
		c.refused(ctx, other, key, noRelease+" (after the nested Do returned)")
		if err := l1.Unlock(ctx); err != nil {
			c.Errorf("%s: the nested hold's Unlock: %v", noRelease, err)
		}
		c.refused(ctx, other, key, noRelease+" (after the nested Lock's Unlock)")

		// Without Do's ctx.
		wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		lk, err := a.Lock(wctx, key)
		wcancel()
		switch {
		case err == nil:
			c.Errorf("%s: Lock without Do's ctx returned a second hold", contender)
			_ = lk.Unlock(ctx)
		case !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded):
			c.Errorf("%s: Lock without Do's ctx: got %v, want an error matching ErrNotAcquired and context.DeadlineExceeded", contender, err)
		}
		c.refused(ctx, a, key, contender+" (TryLock without Do's ctx)")
		ranTry := false
		err = locker.TryDo(ctx, a, key, func(context.Context) error { ranTry = true; return nil })
		if !errors.Is(err, locker.ErrNotAcquired) || ranTry {
			c.Errorf("%s: TryDo without Do's ctx returned %v and ran its function: %v", contender, err, ranTry)
		}
		return nil
	})
	if err != nil {
		c.Errorf("Do must return its function's result (nil): got %v", err)
	}
	if !ran1 {
		c.Fatalf("Do must run its function on a free key")
	}
	lk, err := other.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("%s: after the outermost Do returned, TryLock from another Locker: %v", freeAfter, err)
	}
	c.unlock(ctx, lk, heldUntil)
}
