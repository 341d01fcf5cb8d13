package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/golocker/locker"
)

func testLockWaits(c *caseT) {
	ctx := c.ctx(c.within(8))
	key := c.key()
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()

	// A waiting Lock gets the key once its holder unlocks it.
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	res := lockAsync(ctx, b, key)
	select {
	case r := <-res:
		if r.err == nil {
			_ = r.lk.Unlock(ctx)
			c.Fatalf("%s: Lock from another Locker returned a lock while the key was held", exclusive)
		}
		c.Fatalf("%s: Lock failed while the key was held elsewhere: %v", c.contract, r.err)
	case <-time.After(c.pause()):
	}
	c.unlock(ctx, la, heldUntil)
	r := <-res // b's Lock ends by itself at the case's deadline
	if r.err != nil {
		c.Fatalf("%s: the waiting Lock after the Unlock: %v", c.contract, r.err)
	}
	if r.lk.Token() <= la.Token() {
		c.Errorf("%s: the waiter got token %d after token %d", fencing, r.lk.Token(), la.Token())
	}
	// A lock handed over to a waiter is renewed like any other.
	if !c.keepsHeld(ctx, c.h.TTL+c.h.TTL/2, other, []locker.Lock{r.lk}, heldUntil+" (a lock a waiting Lock got when its holder unlocked)") {
		return
	}
	c.unlock(ctx, r.lk, heldUntil)

	// The ctx given to Lock or TryLock bounds only the wait.
	key1, key2 := c.key(), c.key()
	lctx, cancel := context.WithCancel(ctx)
	l1, err := a.Lock(lctx, key1)
	cancel()
	if err != nil {
		c.Fatalf("Lock on a free key must succeed: %v", err)
	}
	tctx, tcancel := context.WithCancel(ctx)
	l2, err := a.TryLock(tctx, key2)
	tcancel()
	if err != nil {
		c.Fatalf("TryLock on a free key must succeed: %v", err)
	}
	const bounds = "the ctx given to Lock or TryLock bounds only the wait: cancelling it after the call returned must neither release nor lose the lock"
	if !c.keepsHeld(ctx, 2*c.h.TTL+c.h.TTL/2, other, []locker.Lock{l1, l2}, bounds) {
		return
	}
	c.unlock(ctx, l1, bounds)
	c.unlock(ctx, l2, bounds)
}

func testCancellation(c *caseT) {
	ctx := c.ctx(c.within(10))
	key := c.key()
	a := c.newLocker()
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")

	contract := c.contract
	check := func(r lockResult, want error) bool {
		c.Helper()
		switch {
		case r.err == nil:
			c.grantedWhileHeld(ctx, la, r.lk, "Lock", exclusive)
			return false
		case !errors.Is(r.err, locker.ErrNotAcquired) || !errors.Is(r.err, want):
			c.Errorf("%s: got %v, want an error matching ErrNotAcquired and %v", contract, r.err, want)
			return false
		}
		return true
	}

	// Deadlines, one after another on one Locker.
	b := c.newLocker()
	for i := range 50 {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(20+10*(i%4))*time.Millisecond)
		lk, err := b.Lock(wctx, key)
		cancel()
		if !check(lockResult{lk, err}, context.DeadlineExceeded) {
			break
		}
	}
	// A ctx already cancelled.
	dead, cancel := context.WithCancel(ctx)
	cancel()
	lk, err := b.Lock(dead, key)
	check(lockResult{lk, err}, context.Canceled)

	// Cancellations, concurrently, from several Lockers.
	const lockers, waits = 3, 10
	results := make(chan lockResult, lockers*waits)
	var wg sync.WaitGroup
	waiters := []locker.Locker{b}
	for range lockers {
		l := c.newLocker()
		waiters = append(waiters, l)
		for j := range waits {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				stop := time.AfterFunc(time.Duration(j)*3*time.Millisecond, cancel)
				defer stop.Stop()
				lk, err := l.Lock(wctx, key)
				results <- lockResult{lk, err}
			}()
		}
	}
	wg.Wait()
	close(results)
	for r := range results {
		if !check(r, context.Canceled) {
			break
		}
	}

	// Nothing may be left behind: once A unlocks, the key is free within
	// TTL/2, and stays free. A Lock returns when its ctx ends, while a store
	// call it made may still be on its way: what that call leaves (a grant
	// that comes late, a waiter entry) goes in the background, promptly.
	c.unlock(ctx, la, heldUntil)
	const residue = "a Lock that failed because its ctx ended must leave no waiter behind: once the holder unlocked, the key must be free within TTL/2 and stay free"
	fresh := c.newLocker()
	lk, err = c.soonTryLock(ctx, fresh, key, time.Now(), c.h.TTL/2)
	if err != nil {
		c.Fatalf("%s: no TryLock succeeded within TTL/2 of the Unlock: %v", residue, err)
	}
	c.unlock(ctx, lk, heldUntil)
	takers := append([]locker.Locker{fresh}, waiters...)
	window := max(2*c.h.TTL, time.Second)
	for i, start := 0, time.Now(); time.Since(start) < window; i++ {
		if !sleep(ctx, c.every()) {
			c.Fatalf("%s: the case ran out of time: %v", residue, ctx.Err())
		}
		lk, err := takers[i%len(takers)].TryLock(ctx, key)
		if err != nil {
			c.Fatalf("%s: TryLock %v after Unlock: %v", residue, time.Since(start).Round(time.Millisecond), err)
		}
		c.unlock(ctx, lk, heldUntil)
	}
}
