package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

// The cases of this file drive waits through store faults: waits cancelled
// while cut off from the store, a store restart under a waiting Lock, and a
// waiter that crashes while queued.

// Contracts, quoted by the failure messages.
const (
	noResidue     = "a wait that ended while its Locker was cut off from the store must leave nothing that holds up the key once the store answers again (the key free for others within TTL/2 of the holder's Unlock)"
	ridesOut      = "a waiting Lock must ride out a store restart and get the key within its ctx"
	deadWaiterEnd = "a waiter that crashed while queued must not hold up the key for longer than its TTL"
	laterRelease  = "an Unlock whose store call failed (its Locker cut off from the store) must still release the key once the store answers, well within the TTL"
)

func testUnlockWhileIsolated(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(6))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")

	heal := c.isolate(a)
	uctx, cancel := context.WithTimeout(ctx, c.pause())
	err := la.Unlock(uctx)
	cancel()
	c.Logf("Unlock while cut off from the store returned %v", err)
	c.doneClosed(la, "Done must be closed once Unlock returned, whatever the outcome")
	heal()
	start := time.Now()
	lb, err := c.soonTryLock(ctx, b, key, time.Now(), c.h.TTL/2)
	if err != nil {
		c.Fatalf("%s: TryLock %v after the store came back: %v", laterRelease, time.Since(start).Round(time.Millisecond), err)
	}
	c.Logf("the key was free for another Locker %v after the store came back", time.Since(start).Round(time.Millisecond))
	c.unlock(ctx, lb, heldUntil)
}

func testCancelWhileIsolated(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(8))
	key := c.key()
	a, w, b := c.newLocker(), c.newLocker(), c.newLocker()
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")

	// Waits that queue, then lose the store, then are cancelled.
	const waits = 4
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan lockResult, waits)
	for range waits {
		go func() {
			lk, err := w.Lock(wctx, key)
			results <- lockResult{lk, err}
		}()
	}
	sleep(ctx, c.pause())
	healOnce := c.isolate(w)
	cancel()
	cancelled := time.Now()
	for range waits {
		select {
		case r := <-results:
			if r.err == nil {
				c.grantedWhileHeld(ctx, la, r.lk, "Lock", exclusive)
			}
		case <-ctx.Done():
			c.Fatalf("a Lock whose ctx was cancelled while cut off from the store must return: still waiting when the case ended")
		}
	}
	healOnce()
	// A request sent before the cancel may still be on its way (queued in
	// a proxy or a pooler) and take the key until its fence, at most
	// driver.FenceWindow after it was sent; its undo frees the key after
	// that. The holder unlocks once no such request can take the key, so
	// that a key taken after the Unlock is a residue.
	sleep(ctx, time.Until(cancelled.Add(driver.FenceWindow(c.h.TTL))))
	// Whatever the Lockers must clean up, they can now: the key must be
	// free soon after the holder's Unlock, and stay free.
	c.unlock(ctx, la, heldUntil)
	start := time.Now()
	lb, err := c.soonTryLock(ctx, b, key, time.Now(), c.h.TTL/2)
	if err != nil {
		c.Fatalf("%s: TryLock %v after Unlock: %v", noResidue, time.Since(start).Round(time.Millisecond), err)
	}
	c.Logf("the key was free for another Locker %v after the holder's Unlock", time.Since(start).Round(time.Millisecond))
	c.unlock(ctx, lb, heldUntil)
	for i, start := 0, time.Now(); time.Since(start) < max(c.h.TTL, 500*time.Millisecond); i++ {
		if !sleep(ctx, c.every()) {
			c.Fatalf("%s: the case ran out of time: %v", noResidue, ctx.Err())
		}
		taker := []locker.Locker{b, w}[i%2]
		lk, err := taker.TryLock(ctx, key)
		if err != nil {
			c.Fatalf("%s: TryLock %v after the first one: %v", noResidue, time.Since(start).Round(time.Millisecond), err)
		}
		c.unlock(ctx, lk, heldUntil)
	}
}

func testLockRidesOutRestart(c *caseT) {
	c.need("Restart", c.h.Restart != nil, "restart the store")
	ctx := c.ctx(c.within(8) + 2*c.slack)
	key := c.key()
	a, b := c.newLocker(), c.newLocker()
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")

	res := lockAsync(ctx, b, key)
	sleep(ctx, c.pause())
	c.h.Restart(c.t)
	// The holder's lock may have gone with the restart; either way it is
	// given up now.
	if err := la.Unlock(ctx); err != nil && !errors.Is(err, locker.ErrNotHeld) {
		c.Logf("the holder's Unlock after the restart: %v", err)
	}
	select {
	case r := <-res:
		if r.err != nil {
			c.Fatalf("%s: Lock returned %v", ridesOut, r.err)
		}
		c.held(r.lk, ridesOut)
		c.unlock(ctx, r.lk, heldUntil)
	case <-ctx.Done():
		c.Fatalf("%s: still waiting when the case ended", ridesOut)
	}
}

func testWaiterCrash(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a Locker")
	ctx := c.ctx(c.within(6))
	key := c.key()
	a, w, b := c.newLocker(), c.newLocker(), c.newLocker()
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")

	res := lockAsync(ctx, w, key)
	sleep(ctx, c.pause())
	c.h.Crash(c.t, w)
	c.unlock(ctx, la, heldUntil)
	start := time.Now()
	pctx, pcancel := context.WithTimeout(ctx, c.within(1))
	lb, err := pollTryLock(pctx, b, key, c.every())
	pcancel()
	if err != nil {
		c.Fatalf("%s: TryLock %v after the holder's Unlock: %v", deadWaiterEnd, time.Since(start).Round(time.Millisecond), err)
	}
	c.Logf("a crashed waiter held up the key for %v after the holder's Unlock", time.Since(start).Round(time.Millisecond))
	c.unlock(ctx, lb, heldUntil)
	select {
	case r := <-res:
		if r.err == nil {
			// A lock the crashed Locker can never use: only its Close
			// ends it. Its grant is no failure of the contract.
			c.Logf("the crashed waiter's Lock returned a lock (token %d)", r.lk.Token())
		}
	default:
	}
}
