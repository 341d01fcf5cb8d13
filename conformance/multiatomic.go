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

// testMultiTryAtomic: while one Locker fails TryLockMulti on eight keys
// again and again (the last one held elsewhere), another polls the first
// with TryLock and must never find it taken. Taken one by one, the first key
// would be held for most of each failed call.
func testMultiTryAtomic(c *caseT) {
	if !c.h.MultiAtomic {
		c.Skipf("Harness.MultiAtomic is false: the backend takes a multi-key lock's keys one by one")
	}
	ctx := c.ctx(c.within(4))
	keys := c.multiKeys(8)
	a, holder, probe := c.newLocker(), c.newLocker(), c.newLocker()
	last := c.mustTryLock(ctx, holder, keys[len(keys)-1], "TryLock on a free key must succeed")

	var errs errList
	var caught atomic.Bool
	var stopped atomic.Bool
	var probes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ; !stopped.Load(); probes.Add(1) {
			runtime.Gosched()
			lk, err := probe.TryLock(ctx, keys[0])
			switch {
			case err == nil:
				if err := lk.Unlock(ctx); err != nil {
					errs.add(fmt.Errorf("probe: Unlock(%s): %w", short(keys[0]), err))
					return
				}
			case errors.Is(err, locker.ErrNotAcquired) && ctx.Err() == nil:
				errs.add(fmt.Errorf("%s was held while TryLockMulti failed: %w", short(keys[0]), err))
				caught.Store(true)
				return
			default:
				errs.add(fmt.Errorf("probe: TryLock(%s): %w", short(keys[0]), err))
				return
			}
		}
	}()
	// A second and 100 rounds of each side at least, so that they
	// interleave on a loaded machine; 5 s at most.
	start := time.Now()
	for i := 0; time.Since(start) < 5*time.Second && !caught.Load(); i++ {
		if time.Since(start) > time.Second && i >= 100 && probes.Load() >= 100 {
			break
		}
		runtime.Gosched()
		m, err := c.lockMulti(ctx, a, keys, false)
		if err == nil {
			errs.add(fmt.Errorf("%s: round %d: TryLockMulti succeeded while %s was held elsewhere", exclusive, i, short(keys[len(keys)-1])))
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
