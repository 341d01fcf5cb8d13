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

// Contracts of the multi-key cases, quoted by their failure messages.
const (
	multiNoCycle   = "two LockMulti calls on the same keys given in opposite orders must never wait for each other in a cycle, and never hold a key together"
	multiAllOrNone = "when LockMulti or TryLockMulti fails, no key may be left held: the keys it took must be free for another Locker within TTL/2"
	multiCrash     = "the keys of a LockMulti holder that crashed must all be free within one TTL"
	multiLoss      = "when one key of a MultiLock vanishes from the store, the MultiLock's Done must close and Err match ErrLost, and DoMulti must cancel its function's ctx with ErrLost"
	multiResidue   = "LockMulti calls whose ctx ended must leave nothing behind: once the holder unlocked, every key must be free within TTL/2 and stay free"
)

// multiLock is what the multi-key cases need of a *locker.MultiLock.
type multiLock interface {
	Keys() []string
	Token(key string) uint64
	Done() <-chan struct{}
	Err() error
	Unlock(ctx context.Context) error
}

// lockMultiFunc takes keys through l, waiting or not.
type lockMultiFunc func(ctx context.Context, l locker.Locker, keys []string, wait bool) (multiLock, error)

// lockMulti calls locker.LockMulti or locker.TryLockMulti, or the
// Harness's override, which the suite's own test sets to broken
// implementations.
func (c *caseT) lockMulti(ctx context.Context, l locker.Locker, keys []string, wait bool) (multiLock, error) {
	if c.h.lockMulti != nil {
		return c.h.lockMulti(ctx, l, keys, wait)
	}
	var m *locker.MultiLock
	var err error
	if wait {
		m, err = locker.LockMulti(ctx, l, keys)
	} else {
		m, err = locker.TryLockMulti(ctx, l, keys)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// multiKeys returns n fresh keys of the case, in byte order.
func (c *caseT) multiKeys(n int) []string {
	base := c.key()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s.%d", base, i)
	}
	return keys
}

// allFree checks that other can take every key of keys within TTL/2, and
// releases them.
func (c *caseT) allFree(ctx context.Context, other locker.Locker, keys []string, contract string) bool {
	c.Helper()
	for _, k := range keys {
		lk, err := c.soonTryLock(ctx, other, k, time.Now(), c.h.TTL/2)
		if err != nil {
			c.Errorf("%s: TryLock(%s) from another Locker: %v", contract, short(k), err)
			return false
		}
		c.unlock(ctx, lk, heldUntil)
	}
	return true
}

// testMultiNoDeadlock: two Lockers take {k0, k1} and {k1, k0} in a loop.
func testMultiNoDeadlock(c *caseT) {
	ctx := c.ctx(c.within(4))
	keys := c.multiKeys(2)
	orders := [][]string{keys, {keys[1], keys[0]}}
	c.multiOrderProbe(ctx, keys)
	var occupancy [2]atomic.Int32
	var errs errList
	const rounds = 200
	stop := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for _, order := range orders {
		l := c.newLocker()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds && time.Now().Before(stop); i++ {
				m, err := c.lockMulti(ctx, l, order, true)
				if err != nil {
					errs.add(fmt.Errorf("round %d: LockMulti(%q): %w", i, order, err))
					return
				}
				for j := range occupancy {
					occupancy[j].Add(1)
				}
				// Stay a moment, so that an overlap shows.
				runtime.Gosched()
				time.Sleep(50 * time.Microsecond)
				for j := range occupancy {
					if n := occupancy[j].Load(); n != 1 {
						errs.add(fmt.Errorf("round %d: %s held by %d LockMulti holders at once", i, short(keys[j]), n))
					}
				}
				for j := range occupancy {
					occupancy[j].Add(-1)
				}
				if err := m.Unlock(ctx); err != nil {
					errs.add(fmt.Errorf("round %d: Unlock: %w", i, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	errs.report(c, multiNoCycle)
}

// testMultiAllOrNothing: TryLockMulti and LockMulti that fail on the last
// key leave the first ones free.
func testMultiAllOrNothing(c *caseT) {
	ctx := c.ctx(c.within(4))
	keys := c.multiKeys(3)
	a, b, holder := c.newLocker(), c.newLocker(), c.newLocker()
	last := c.mustTryLock(ctx, holder, keys[2], "TryLock on a free key must succeed")

	if m, err := c.lockMulti(ctx, a, keys, false); err == nil {
		c.Errorf("%s: TryLockMulti(%q) succeeded while %s was held elsewhere", exclusive, keys, short(keys[2]))
		_ = m.Unlock(ctx)
	} else if !errors.Is(err, locker.ErrNotAcquired) {
		c.Errorf("%s: TryLockMulti with its last key held elsewhere: got %v, want an error matching ErrNotAcquired", multiAllOrNone, err)
	}
	c.allFree(ctx, b, keys[:2], multiAllOrNone+" (after TryLockMulti)")

	wctx, cancel := context.WithTimeout(ctx, c.pause())
	m, err := c.lockMulti(wctx, a, keys, true)
	cancel()
	if err == nil {
		c.Errorf("%s: LockMulti(%q) succeeded while %s was held elsewhere", exclusive, keys, short(keys[2]))
		_ = m.Unlock(ctx)
	} else if !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		c.Errorf("%s: LockMulti whose ctx ended: got %v, want an error matching ErrNotAcquired and context.DeadlineExceeded", multiAllOrNone, err)
	}
	c.allFree(ctx, b, keys[:2], multiAllOrNone+" (after LockMulti)")
	c.unlock(ctx, last, heldUntil)
}

// testMultiCrash: a crashed LockMulti holder's keys are all free within
// one TTL.
func testMultiCrash(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a Locker")
	ctx := c.ctx(c.within(4))
	keys := c.multiKeys(3)
	a, b := c.newLocker(), c.newLocker()
	if _, err := c.lockMulti(ctx, a, keys, true); err != nil {
		c.Fatalf("LockMulti on free keys must succeed: %v", err)
	}
	c.h.Crash(c.t, a)
	wctx, cancel := context.WithTimeout(ctx, c.within(1))
	defer cancel()
	for {
		m, err := c.lockMulti(wctx, b, keys, false)
		if err == nil {
			_ = m.Unlock(ctx)
			return
		}
		if !errors.Is(err, locker.ErrNotAcquired) {
			c.Fatalf("%s: TryLockMulti: %v", multiCrash, err)
		}
		if !sleep(wctx, c.every()) {
			c.Fatalf("%s: still not free after %v: %v", multiCrash, c.within(1), err)
		}
	}
}

// testMultiLoss: the loss of one key closes the MultiLock's Done.
func testMultiLoss(c *caseT) {
	c.need("DeleteBehind", c.h.DeleteBehind != nil, "delete a lock behind its holder's back")
	ctx := c.ctx(c.within(6))
	keys := c.multiKeys(3)
	a := c.newLocker()
	m, err := c.lockMulti(ctx, a, keys, true)
	if err != nil {
		c.Fatalf("LockMulti on free keys must succeed: %v", err)
	}
	c.h.DeleteBehind(c.t, keys[2])
	select {
	case <-m.Done():
	case <-ctx.Done():
		c.Fatalf("%s: Done still open after %v", multiLoss, c.within(6))
	}
	if err := m.Err(); !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: Err = %v", multiLoss, err)
	}
	_ = m.Unlock(ctx)

	keys = c.multiKeys(3)
	var cause error
	ran := false
	err = locker.DoMulti(ctx, a, keys, func(fctx context.Context) error {
		ran = true
		c.h.DeleteBehind(c.t, keys[1])
		<-fctx.Done() // fctx ends with ctx at the latest
		cause = context.Cause(fctx)
		return nil
	})
	if !ran {
		c.Fatalf("DoMulti must run its function on free keys: %v", err)
	}
	if !errors.Is(cause, locker.ErrLost) {
		c.Errorf("%s: cause = %v", multiLoss, cause)
	}
	if !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: DoMulti returned %v, want an error matching ErrLost", multiLoss, err)
	}
}

// testMultiCancel: LockMulti calls that wait for a held middle key and are
// cancelled leave nothing behind.
func testMultiCancel(c *caseT) {
	ctx := c.ctx(c.within(6))
	keys := c.multiKeys(3)
	holder := c.newLocker()
	mid := c.mustTryLock(ctx, holder, keys[1], "TryLock on a free key must succeed")

	const waiters, waits = 2, 5
	var errs errList
	var wg sync.WaitGroup
	lockers := []locker.Locker{holder}
	for range waiters {
		l := c.newLocker()
		lockers = append(lockers, l)
		for j := range waits {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, cancel := context.WithTimeout(ctx, time.Duration(10+10*j)*time.Millisecond)
				defer cancel()
				m, err := c.lockMulti(wctx, l, keys, true)
				switch {
				case err == nil:
					errs.add(fmt.Errorf("LockMulti got %s while another Locker held it", short(keys[1])))
					_ = m.Unlock(ctx)
				case !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded):
					errs.add(fmt.Errorf("LockMulti whose ctx ended: got %v, want an error matching ErrNotAcquired and context.DeadlineExceeded", err))
				}
			}()
		}
	}
	wg.Wait()
	if !errs.report(c, multiResidue) {
		return
	}
	c.unlock(ctx, mid, heldUntil)
	fresh := c.newLocker()
	if !c.allFree(ctx, fresh, keys, multiResidue) {
		return
	}
	window := max(2*c.h.TTL, time.Second)
	for i, start := 0, time.Now(); time.Since(start) < window; i++ {
		if !sleep(ctx, c.every()) {
			c.Fatalf("%s: the case ran out of time: %v", multiResidue, ctx.Err())
		}
		m, err := c.lockMulti(ctx, lockers[i%len(lockers)], keys, false)
		if err != nil {
			c.Fatalf("%s: TryLockMulti %v after Unlock: %v", multiResidue, time.Since(start).Round(time.Millisecond), err)
		}
		if err := m.Unlock(ctx); err != nil {
			c.Errorf("%s: Unlock of a MultiLock: %v", heldUntil, err)
		}
	}
}

// multiOrderProbe checks, without a race, that a LockMulti given its keys
// in descending order waits for the lowest key while holding nothing: the
// order that keeps two callers from waiting on each other in a cycle. keys
// are in ascending order.
func (c *caseT) multiOrderProbe(ctx context.Context, keys []string) {
	c.Helper()
	x, a, probe := c.newLocker(), c.newLocker(), c.newLocker()
	low := c.mustTryLock(ctx, x, keys[0], multiNoCycle)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		m, err := c.lockMulti(wctx, a, []string{keys[1], keys[0]}, true)
		if err == nil {
			err = m.Unlock(context.WithoutCancel(ctx))
		}
		done <- err
	}()
	// While the lowest key is held elsewhere, a LockMulti that took its keys
	// in byte order holds nothing: the higher key stays free.
	for range 3 {
		if !sleep(ctx, c.pause()) {
			break
		}
		lk, err := probe.TryLock(ctx, keys[1])
		if err != nil {
			c.Errorf("%s: while %s is held elsewhere, a waiting LockMulti(%s, %s) holds %s: it takes keys in the caller's order, so two callers can wait for each other in a cycle (%v)",
				multiNoCycle, short(keys[0]), short(keys[1]), short(keys[0]), short(keys[1]), err)
			break
		}
		c.unlock(ctx, lk, multiNoCycle)
	}
	c.unlock(ctx, low, multiNoCycle)
	if err := <-done; err != nil {
		c.Errorf("%s: LockMulti after the lowest key was freed: %v", multiNoCycle, err)
	}
}
