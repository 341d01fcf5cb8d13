package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

// watchBound is the contract of locker.Watch that testWatch checks.
const watchBound = "locker.Watch must report a change of holder within one TTL of the store's change, never a lower token after a higher one"

// seen is one report of a watch, with the moment it arrived.
type seen struct {
	st  locker.Status
	err error
	at  time.Time
}

// testWatch: a watcher that holds nothing sees the free key, then holder A;
// once A unlocks it reports nobody; with Crash, once A crashed and B took
// the key, it reports B's higher token. Each within the case's TTL-based
// deadline; the delays are logged.
func testWatch(c *caseT) {
	ctx := c.ctx(c.within(8))
	key := c.key()
	a, b, w := c.newLocker(), c.newLocker(), c.newLocker()

	wctx, stop := context.WithCancel(ctx)
	reports := make(chan seen, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for st, err := range locker.Watch(wctx, w, key) {
			select {
			case reports <- seen{st, err, time.Now()}:
			case <-wctx.Done():
				return
			}
		}
	}()
	defer func() { stop(); <-done }()

	var high uint64
	// next waits for a report that satisfies ok, within d; it checks the
	// order of tokens on the way.
	next := func(d time.Duration, what string, ok func(locker.Status) bool) seen {
		c.Helper()
		timer := time.NewTimer(d)
		defer timer.Stop()
		for {
			select {
			case r := <-reports:
				if errors.Is(r.err, errors.ErrUnsupported) {
					c.Skipf("the Locker cannot inspect: %v", r.err)
				}
				if r.err != nil {
					c.Logf("the watch reported an error: %v", r.err)
					continue
				}
				if r.st.Held && r.st.Token < high {
					c.Fatalf("%s: reported token %d after token %d", watchBound, r.st.Token, high)
				}
				high = max(high, r.st.Token)
				if ok(r.st) {
					return r
				}
			case <-timer.C:
				c.Fatalf("%s: no report of %s within %v", watchBound, what, d)
			}
		}
	}
	free := func(st locker.Status) bool { return !st.Held }

	next(c.within(1), "the free key", free)
	lk := c.mustTryLock(ctx, a, key, watchBound)
	next(c.within(1), "holder A", func(st locker.Status) bool { return st.Held && st.Token == lk.Token() })
	c.unlock(ctx, lk, watchBound)
	unlocked := time.Now()
	r := next(c.within(1), "nobody after A's Unlock", free)
	c.Logf("the watch reported the Unlock %v after it returned", r.at.Sub(unlocked).Round(time.Millisecond))

	if c.h.Crash == nil {
		c.Logf("Harness.Crash is nil: the watch is not checked across a crashed holder")
		return
	}
	a2 := c.newLocker()
	lk = c.mustTryLock(ctx, a2, key, watchBound)
	first := lk.Token()
	next(c.within(1), "holder A", func(st locker.Status) bool { return st.Held && st.Token == first })
	waiting := lockAsync(ctx, b, key)
	crashed := time.Now()
	c.h.Crash(c.t, a2)
	var lb locker.Lock
	select {
	case res := <-waiting:
		if res.err != nil {
			c.Fatalf("%s: B's Lock after A crashed: %v", watchBound, res.err)
		}
		lb = res.lk
	case <-ctx.Done():
		c.Fatalf("%s: B did not get the key after A crashed", watchBound)
	}
	granted := time.Now()
	defer func() { _ = lb.Unlock(context.WithoutCancel(ctx)) }()
	if lb.Token() <= first {
		c.Errorf("%s: B's token %d is not above the crashed holder's %d", fencing, lb.Token(), first)
	}
	r = next(c.within(1), "holder B after A crashed", func(st locker.Status) bool { return st.Held && st.Token == lb.Token() })
	c.Logf("the watch reported B %v after B's grant, %v after A's crash", r.at.Sub(granted).Round(time.Millisecond), r.at.Sub(crashed).Round(time.Millisecond))
}
