package conformance

import (
	"context"

	"github.com/golocker/locker"
)

// The case of this file checks that Close ends the calls whose ctx never
// ends while their Locker is cut off from the store: nothing else can.

// closeBackground is the contract, quoted by the failure messages.
const closeBackground = "Close of a Locker cut off from the store must end its Lock, TryLock and Unlock calls whose ctx never ends (context.Background()) within a bounded time, Lock and TryLock with an error"

func testCloseEndsBackgroundCalls(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(6))
	busy := c.key()
	a, b := c.newLocker(), c.newLocker()
	lb := c.mustTryLock(ctx, b, busy, "TryLock on a free key must succeed")
	defer c.unlock(ctx, lb, heldUntil)
	la := c.mustTryLock(ctx, a, c.key(), "TryLock on a free key must succeed")
	heal := c.isolate(a)
	defer heal()

	type result struct {
		op  string
		lk  locker.Lock
		err error
	}
	bg := context.Background() // its Done is nil: it never ends
	results := make(chan result, 3)
	go func() { lk, err := a.Lock(bg, busy); results <- result{"Lock of a held key", lk, err} }()
	free := c.key()
	go func() { lk, err := a.TryLock(bg, free); results <- result{"TryLock of a free key", lk, err} }()
	go func() { results <- result{"Unlock", nil, la.Unlock(bg)} }()
	sleep(ctx, c.pause()) // the calls wait for the store
	_, wctx, cancel := c.closeCutOff(ctx, a, closeBackground)
	defer cancel()
	bound := c.within(2)
	for range 3 {
		r, ok := recvBy(wctx, results)
		if !ok {
			c.Errorf("%s: a call with context.Background() still running %v after Close was called", closeBackground, bound)
			return
		}
		if r.op != "Unlock" && r.err == nil {
			c.Errorf("%s: %s on a Locker closed while cut off returned a lock (token %d)", closeBackground, r.op, r.lk.Token())
			_ = r.lk.Unlock(context.WithoutCancel(ctx))
		}
	}
}
