package conformance

import (
	"context"
	"time"

	"github.com/golocker/locker"
)

// The case of this file cancels waits while their Locker is cut off and
// lets the store see their requests only after the holder's Unlock: a
// partition that holds bytes and delivers them when it heals, as TCP
// retransmits them. A request that arrives then finds the key free.

// noLateHolder is the contract of LateDelivery.
const noLateHolder = "a wait cancelled while its Locker was cut off must leave no holder, even when its requests reach the store after the holder's Unlock (the key free within TTL/2 of the heal, and free from then on)"

func testLateDelivery(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(8))
	const keys, waits = 3, 3 // waits per key
	a, w, b := c.newLocker(), c.newLocker(), c.newLocker()
	var names []string
	var held []locker.Lock
	for range keys {
		key := c.key()
		names = append(names, key)
		held = append(held, c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed"))
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan lockResult, keys*waits)
	for _, key := range names {
		for range waits {
			go func() {
				lk, err := w.Lock(wctx, key)
				results <- lockResult{lk, err}
			}()
		}
	}
	sleep(ctx, c.pause())
	heal := c.isolate(w)
	// The waiters send their next requests into the cut, and give up.
	sleep(ctx, 2*c.pause())
	cancel()
	for range keys * waits {
		select {
		case r := <-results:
			if r.err == nil {
				for _, lk := range held {
					if lk.Key() == r.lk.Key() {
						c.grantedWhileHeld(ctx, lk, r.lk, "Lock", exclusive)
					}
				}
			}
		case <-ctx.Done():
			c.Fatalf("a Lock whose ctx was cancelled while cut off from the store must return: still waiting when the case ended")
		}
	}
	// The keys are free in the store before the waiters' requests reach it.
	for _, lk := range held {
		c.unlock(ctx, lk, heldUntil)
	}
	heal()
	healed := time.Now()
	for _, key := range names {
		lb, err := c.soonTryLock(ctx, b, key, healed, c.h.TTL/2)
		if err != nil {
			c.Fatalf("%s: TryLock(%s) %v after the heal: %v", noLateHolder, short(key), time.Since(healed).Round(time.Millisecond), err)
		}
		c.unlock(ctx, lb, heldUntil)
	}
	c.Logf("every key was free for another Locker %v after the heal", time.Since(healed).Round(time.Millisecond))
	// From TTL/2 after the heal on, every try must get every key.
	sleep(ctx, time.Until(healed.Add(c.h.TTL/2)))
	for i, start := 0, time.Now(); time.Since(start) < max(c.h.TTL, 500*time.Millisecond); i++ {
		taker := []locker.Locker{b, w}[i%2]
		for _, key := range names {
			lk, err := taker.TryLock(ctx, key)
			if err != nil {
				c.Fatalf("%s: TryLock(%s) %v after the heal: %v", noLateHolder, short(key), time.Since(healed).Round(time.Millisecond), err)
			}
			c.unlock(ctx, lk, heldUntil)
		}
		if !sleep(ctx, c.every()) {
			c.Fatalf("%s: the case ran out of time: %v", noLateHolder, ctx.Err())
		}
	}
}
