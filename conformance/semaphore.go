package conformance

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golocker/locker"
)

// testSemaphoreLimit races more Lockers and goroutines than the limit on
// one semaphore, some taking two permits, and counts the permits held at
// once.
func testSemaphoreLimit(c *caseT) {
	const limit, lockers, goroutines, rounds = 3, 5, 3, 8 // 120 acquisitions
	ctx := c.ctx(10*c.h.TTL + 12*c.slack)
	key := c.key()
	var (
		inUse    atomic.Int32
		over     atomic.Int64
		peak     atomic.Int32
		acquired atomic.Int64
		errs     errList
		wg       sync.WaitGroup
	)
	for range lockers {
		s := c.semaphore(c.newLocker(), key, limit)
		for g := range goroutines {
			weight := 1 + g%2
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					p, err := s.AcquireN(ctx, weight)
					if err != nil {
						errs.add(fmt.Errorf("AcquireN(%d): %w", weight, err))
						return
					}
					n := inUse.Add(int32(weight))
					if n > limit {
						over.Add(1)
					}
					for {
						if m := peak.Load(); n <= m || peak.CompareAndSwap(m, n) {
							break
						}
					}
					acquired.Add(1)
					runtime.Gosched()
					time.Sleep(2 * time.Millisecond)
					inUse.Add(-int32(weight))
					if err := p.Unlock(ctx); err != nil {
						errs.add(fmt.Errorf("Unlock: %w", err))
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	errs.report(c, "Acquire and Unlock of a contended semaphore must succeed")
	if n := over.Load(); n > 0 {
		c.Errorf("%s: more than %d permits were held at once %d times (at most %d) in %d acquisitions", withinLimit, limit, n, peak.Load(), acquired.Load())
	}
	if want := int64(lockers * goroutines * rounds); acquired.Load() != want {
		c.Errorf("every Acquire must eventually get its permits: %d of %d acquisitions happened", acquired.Load(), want)
	}
}

// testSemaphoreCrash crashes the holder of one of two permits and checks
// that the permit is back within one TTL, and only after the crashed
// holder's Done closed.
func testSemaphoreCrash(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a holder")
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b, d := c.newLocker(), c.newLocker(), c.newLocker()
	sa, sb, sd := c.semaphore(a, key, 2), c.semaphore(b, key, 2), c.semaphore(d, key, 2)
	pa, err := sa.TryAcquire(ctx)
	if err != nil {
		c.Fatalf("%s: TryAcquire on a free semaphore: %v", withinLimit, err)
	}
	pb, err := sb.TryAcquire(ctx)
	if err != nil {
		c.Fatalf("%s: TryAcquire of the second of two permits: %v", withinLimit, err)
	}
	if p, err := sd.TryAcquire(ctx); err == nil {
		_ = p.Unlock(ctx)
		c.Fatalf("%s: a third permit of two was granted (token %d)", withinLimit, p.Token())
	}
	c.h.Crash(c.t, a)
	wctx, cancel := context.WithTimeout(ctx, c.within(1))
	p, err := pollTry(wctx, c.every(), sd.TryAcquire)
	cancel()
	if err != nil {
		c.Fatalf("a crashed holder's permit must be back within one TTL (%v): %v", c.h.TTL, err)
	}
	select {
	case <-pa.Done():
	default:
		c.Errorf("%s: another Locker got the crashed holder's permit (token %d) while its Done was open", doneBeforeFree, p.Token())
	}
	c.held(pb, "the permit of a holder that did not crash must stay held")
	c.unlock(ctx, p, heldUntil)
	c.unlock(ctx, pb, heldUntil)
}

// testSharedLossIsolate cuts the holders of a semaphore's permit and of a
// read hold off from the store and checks that each one's Done closes
// before another Locker gets what it held.
func testSharedLossIsolate(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(4))
	a, b := c.newLocker(), c.newLocker()
	sa := c.semaphore(a, c.key(), 1)
	sb := c.semaphore(b, sa.Key(), 1)
	ma := c.rwmutex(a, c.key())
	mb := c.rwmutex(b, ma.Key())
	p, err := sa.TryAcquire(ctx)
	if err != nil {
		c.Fatalf("%s: TryAcquire on a free semaphore: %v", withinLimit, err)
	}
	r, err := ma.TryRLock(ctx)
	if err != nil {
		c.Fatalf("%s: TryRLock on a free key: %v", readersShare, err)
	}
	c.isolate(a)
	for _, tc := range []struct {
		what string
		held locker.Lock
		try  func(context.Context, ...locker.LockOption) (locker.Lock, error)
	}{{"the permit", p, sb.TryAcquire}, {"the key of the read hold", r, mb.TryLock}} {
		got, err := pollTry(ctx, c.every(), tc.try)
		if err != nil {
			c.Fatalf("an isolated holder's hold must end after its TTL, and %s be free for others: %v", tc.what, err)
		}
		select {
		case <-tc.held.Done():
		default:
			c.Errorf("%s: another Locker got %s (token %d) while the isolated holder's Done was still open", doneBeforeFree, tc.what, got.Token())
		}
		c.unlock(ctx, got, heldUntil)
	}
}
