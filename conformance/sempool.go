package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golocker/locker"
)

// testSemaphorePool runs a pool of workers on one semaphore, as a render
// farm does: more Lockers than permits, each with one worker that takes a
// permit, holds it a moment, gives it back and asks again at once, until a
// deadline of its own. The deadlines are spread, so that waits end while
// others hold. One Locker crashes holding its permit when the harness can
// crash one. The case counts the permits held at once.
func testSemaphorePool(c *caseT) {
	const limit, lockers = 4, 6
	run := 3 * c.h.TTL
	ctx := c.ctx(run + c.within(2))
	key := c.key()
	var (
		inUse, peak atomic.Int32
		over, taken atomic.Int64
		errs        errList
		wg          sync.WaitGroup
	)
	// crash receives the Locker of the worker that is to crash, once it
	// holds a permit past a quarter of the run; the worker then waits on
	// crashed. quit closes when that worker returns.
	crash, crashed, quit := make(chan locker.Locker), make(chan struct{}), make(chan struct{})
	got := make([]atomic.Int64, lockers)
	start := time.Now()
	for i := range lockers {
		l := c.newLocker()
		s := c.semaphore(l, key, limit)
		// Worker i stops at its own deadline, spread over the last
		// quarter of the run.
		wctx, cancel := context.WithDeadline(ctx, start.Add(run-time.Duration(i)*run/(4*lockers)))
		c.t.Cleanup(cancel)
		toCrash := i == 0 && c.h.Crash != nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			if toCrash {
				defer close(quit)
			}
			for wctx.Err() == nil {
				p, err := s.Acquire(wctx)
				if err != nil {
					if wctx.Err() == nil || !errors.Is(err, locker.ErrNotAcquired) {
						errs.add(fmt.Errorf("Acquire: %w", err))
					}
					return
				}
				n := inUse.Add(1)
				if n > limit {
					over.Add(1)
				}
				for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
				}
				taken.Add(1)
				got[i].Add(1)
				if toCrash && time.Since(start) > run/4 {
					crash <- l
					<-crashed
					inUse.Add(-1)
					return
				}
				select {
				case <-time.After(rand.N(c.every()) + time.Millisecond):
				case <-p.Done():
				case <-wctx.Done():
				}
				inUse.Add(-1)
				if err := p.Unlock(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, locker.ErrLost) {
					errs.add(fmt.Errorf("Unlock: %w", err))
					return
				}
			}
		}()
	}
	if c.h.Crash != nil {
		select {
		case l := <-crash:
			c.h.Crash(c.t, l)
			close(crashed)
		case <-quit:
		}
	}
	wg.Wait()
	errs.report(c, "the workers of a semaphore's pool must get and give back permits")
	if n := over.Load(); n > 0 {
		c.Errorf("%s: more than %d permits were held at once %d times (at most %d) in %d acquisitions of %d workers looping until their own deadlines", withinLimit, limit, n, peak.Load(), taken.Load(), lockers)
	}
	for i := range got {
		if got[i].Load() == 0 {
			c.Errorf("every worker of a semaphore's pool must get permits in turn: worker %d of %d got none in %d acquisitions", i+1, lockers, taken.Load())
		}
	}
}
