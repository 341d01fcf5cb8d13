package conformance

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

func testTryLock(c *caseT) {
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	if la.Key() != key {
		c.Errorf("Lock.Key must return the key as the caller gave it: got %s, want %s", short(la.Key()), short(key))
	}
	if la.Token() == 0 {
		c.Errorf("%s: Token() = 0", fencing)
	}
	c.held(la, heldUntil)
	c.refused(ctx, b, key, "TryLock from another Locker on a held key must fail with ErrNotAcquired")
	c.refused(ctx, a, key, "outside Do's ctx, TryLock on a key its own Locker holds must fail with ErrNotAcquired like any other contender")

	if err := la.Unlock(ctx); err != nil {
		c.Fatalf("Unlock of a held lock must succeed: %v", err)
	}
	c.doneClosed(la, "Done must be closed once Unlock returned")
	if err := la.Err(); err != nil {
		c.Errorf("Err must be nil after a successful Unlock: got %v", err)
	}
	lb, err := b.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("%s: TryLock from another Locker after Unlock: %v", freeAfter, err)
	}
	if lb.Token() <= la.Token() {
		c.Errorf("%s: the next holder got token %d after token %d", fencing, lb.Token(), la.Token())
	}
	c.unlock(ctx, lb, heldUntil)
}

func testMutualExclusion(c *caseT) {
	const lockers, goroutines, rounds = 4, 8, 16 // 512 acquisitions
	ctx := c.ctx(10*c.h.TTL + 12*c.slack)
	key := c.key()

	var (
		occupancy atomic.Int32
		overlaps  atomic.Int64
		acquired  atomic.Int64
		// counter is read, then written after a yield: increments by
		// overlapping holders get lost. It is an atomic only so that the
		// race detector stays quiet when a broken backend lets holders
		// overlap (and because a lock in another process is no
		// happens-before edge the race detector can see).
		counter   atomic.Int64
		lastToken atomic.Uint64
		errs      errList
		tokenErrs errList
		wg        sync.WaitGroup
	)
	for range lockers {
		l := c.newLocker()
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					lk, err := l.Lock(ctx, key)
					if err != nil {
						errs.add(fmt.Errorf("Lock: %w", err))
						return
					}
					if occupancy.Add(1) != 1 {
						overlaps.Add(1)
					}
					acquired.Add(1)
					v := counter.Load()
					runtime.Gosched()
					if (g+r)%4 == 0 {
						time.Sleep(50 * time.Microsecond)
					}
					counter.Store(v + 1)
					tok := lk.Token()
					if prev := lastToken.Load(); tok <= prev {
						tokenErrs.add(fmt.Errorf("token %d after token %d", tok, prev))
					}
					lastToken.Store(tok)
					if occupancy.Load() != 1 {
						overlaps.Add(1)
					}
					occupancy.Add(-1)
					if err := lk.Unlock(ctx); err != nil {
						errs.add(fmt.Errorf("Unlock: %w", err))
						return
					}
				}
			}()
		}
	}
	wg.Wait()

	errs.report(c, "Lock and Unlock of a contended key must succeed")
	if n := overlaps.Load(); n > 0 {
		c.Errorf("%s: holders overlapped %d times in %d acquisitions", exclusive, n, acquired.Load())
	}
	if got, want := counter.Load(), acquired.Load(); got != want {
		c.Errorf("%s: %d read-yield-write increments under the lock left the counter at %d: %d updates were lost to overlapping holders", exclusive, want, got, want-got)
	}
	tokenErrs.report(c, fencing+" (each successive holder, as seen under the lock)")
	if want := int64(lockers * goroutines * rounds); acquired.Load() != want {
		c.Errorf("every Lock must eventually get the key: %d of %d acquisitions happened", acquired.Load(), want)
	}
}
