package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

// The case of this file is LateDelivery for shared holds: waits for a
// permit and for a read hold are cancelled while their Locker is cut off,
// and the store sees their requests only after the holders' Unlock. A
// request that arrives then finds room for it.

// noLatePermit is the contract of SharedLateDelivery.
const noLatePermit = "a wait for a permit or a read hold cancelled while its Locker was cut off must leave no holder, even when its requests reach the store after the holders' Unlock (every permit free within TTL/2 of the heal, and free from then on)"

// lateTarget is a key of SharedLateDelivery: held whole by one Locker,
// waited for by the cut-off one.
type lateTarget struct {
	what  string
	held  locker.Lock
	wait  func(context.Context, ...locker.LockOption) (locker.Lock, error)    // through the cut-off Locker
	whole [2]func(context.Context, ...locker.LockOption) (locker.Lock, error) // every permit, or the write hold
}

func testSharedLateDelivery(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(8))
	const keys, waits, limit = 2, 3, 2 // semaphores and read-write locks; waits per key
	a, w, b := c.newLocker(), c.newLocker(), c.newLocker()
	var targets []lateTarget
	for range keys {
		key := c.key()
		sa, sw, sb := c.semaphore(a, key, limit), c.semaphore(w, key, limit), c.semaphore(b, key, limit)
		held, err := sa.TryAcquireN(ctx, limit)
		if err != nil {
			c.Fatalf("%s: TryAcquireN(%d) on a free semaphore of %d: %v", withinLimit, limit, limit, err)
		}
		all := func(s *locker.Semaphore) func(context.Context, ...locker.LockOption) (locker.Lock, error) {
			return func(ctx context.Context, opts ...locker.LockOption) (locker.Lock, error) {
				return s.TryAcquireN(ctx, limit, opts...)
			}
		}
		targets = append(targets, lateTarget{what: "every permit of " + short(key), held: held, wait: sw.Acquire, whole: [2]func(context.Context, ...locker.LockOption) (locker.Lock, error){all(sb), all(sw)}})
	}
	for range keys {
		key := c.key()
		ma, mw, mb := c.rwmutex(a, key), c.rwmutex(w, key), c.rwmutex(b, key)
		held, err := ma.TryLock(ctx)
		if err != nil {
			c.Fatalf("%s: the write hold of a free key: %v", readersShare, err)
		}
		targets = append(targets, lateTarget{what: "the write hold of " + short(key), held: held, wait: mw.RLock, whole: [2]func(context.Context, ...locker.LockOption) (locker.Lock, error){mb.TryLock, mw.TryLock}})
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan lockResult, len(targets)*waits)
	for _, tg := range targets {
		for range waits {
			go func() {
				lk, err := tg.wait(wctx)
				results <- lockResult{lk, err}
			}()
		}
	}
	sleep(ctx, c.pause())
	heal := c.isolate(w)
	// The waiters send their next requests into the cut, and give up.
	sleep(ctx, 2*c.pause())
	cancel()
	for range len(targets) * waits {
		select {
		case r := <-results:
			if r.err == nil {
				c.Errorf("%s: a wait got a hold of %s (token %d) while another Locker held the key whole", withinLimit, short(r.lk.Key()), r.lk.Token())
				_ = r.lk.Unlock(context.WithoutCancel(ctx))
			}
		case <-ctx.Done():
			c.Fatalf("a wait for a shared hold whose ctx was cancelled while cut off from the store must return: still waiting when the case ended")
		}
	}
	// The keys are free in the store before the waiters' requests reach it.
	for _, tg := range targets {
		c.unlock(ctx, tg.held, heldUntil)
	}
	heal()
	healed := time.Now()
	for _, tg := range targets {
		lk, err := soonTry(ctx, tg.whole[0], max(time.Until(healed.Add(c.h.TTL/2)), 0), c.every())
		if err != nil {
			c.Fatalf("%s: %s %v after the heal: %v", noLatePermit, tg.what, time.Since(healed).Round(time.Millisecond), err)
		}
		c.unlock(ctx, lk, heldUntil)
	}
	c.Logf("every key was free whole for another Locker %v after the heal", time.Since(healed).Round(time.Millisecond))
	// From TTL/2 after the heal on, every try must get every key whole.
	sleep(ctx, time.Until(healed.Add(c.h.TTL/2)))
	for i, start := 0, time.Now(); time.Since(start) < max(c.h.TTL, 500*time.Millisecond); i++ {
		for _, tg := range targets {
			lk, err := tg.whole[i%2](ctx)
			if err != nil {
				c.Fatalf("%s: %s %v after the heal: %v", noLatePermit, tg.what, time.Since(healed).Round(time.Millisecond), err)
			}
			c.unlock(ctx, lk, heldUntil)
		}
		if !sleep(ctx, c.every()) {
			c.Fatalf("%s: the case ran out of time: %v", noLatePermit, ctx.Err())
		}
	}
}

// soonTry is soonTryLock for any one-shot acquisition.
func soonTry(ctx context.Context, try func(context.Context, ...locker.LockOption) (locker.Lock, error), d, every time.Duration) (locker.Lock, error) {
	lk, err := try(ctx)
	if err == nil || !errors.Is(err, locker.ErrNotAcquired) {
		return lk, err
	}
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return pollTry(pctx, every, try)
}
