package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golocker/locker"
)

// multiAtomic is the contract of MultiTryAtomic.
const multiAtomic = "a TryLockMulti that fails because a key is held elsewhere must never hold any of its keys, not even for a moment, where the backend takes the keys in one store operation"

// testMultiTryAtomic: while one Locker fails TryLockMulti on three keys
// again and again (the last one held elsewhere), another polls the first two
// with TryLock and must never find one taken.
func testMultiTryAtomic(c *caseT) {
	if !c.h.MultiAtomic {
		c.Skipf("Harness.MultiAtomic is false: the backend takes a multi-key lock's keys one by one")
	}
	ctx := c.ctx(c.within(4))
	keys := c.multiKeys(3)
	a, holder, probe := c.newLocker(), c.newLocker(), c.newLocker()
	last := c.mustTryLock(ctx, holder, keys[2], "TryLock on a free key must succeed")

	var errs errList
	var stopped atomic.Bool
	var probes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ; !stopped.Load(); probes.Add(1) {
			runtime.Gosched()
			for _, k := range keys[:2] {
				lk, err := probe.TryLock(ctx, k)
				switch {
				case err == nil:
					if err := lk.Unlock(ctx); err != nil {
						errs.add(fmt.Errorf("probe: Unlock(%s): %w", short(k), err))
					}
				case errors.Is(err, locker.ErrNotAcquired) && ctx.Err() == nil:
					errs.add(fmt.Errorf("%s was held while TryLockMulti failed: %w", short(k), err))
				default:
					errs.add(fmt.Errorf("probe: TryLock(%s): %w", short(k), err))
					return
				}
			}
		}
	}()
	// A second at least, and 50 rounds of each side, so that they
	// interleave on a loaded machine; 3 s at most.
	start := time.Now()
	for i := 0; time.Since(start) < 3*time.Second; i++ {
		if time.Since(start) > time.Second && i >= 50 && probes.Load() >= 50 {
			break
		}
		runtime.Gosched()
		m, err := c.lockMulti(ctx, a, keys, false)
		if err == nil {
			errs.add(fmt.Errorf("%s: round %d: TryLockMulti succeeded while %s was held elsewhere", exclusive, i, short(keys[2])))
			_ = m.Unlock(ctx)
			break
		}
		if !errors.Is(err, locker.ErrNotAcquired) {
			errs.add(fmt.Errorf("round %d: TryLockMulti: got %w, want an error matching ErrNotAcquired", i, err))
			break
		}
	}
	stopped.Store(true)
	wg.Wait()
	errs.report(c, multiAtomic)
	c.unlock(context.WithoutCancel(ctx), last, heldUntil)
}
