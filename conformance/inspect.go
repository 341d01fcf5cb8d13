package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

// testInspect: Inspect reports a free key as free, the holder's token (and
// label, with NewLockerWith) while it is held, a sane acquisition and
// expiry, and the key as free again after Unlock. A waiter shows in
// Waiters on stores that queue (logged, not required: some stores poll).
func testInspect(c *caseT) {
	contract := c.contract
	ctx := c.ctx(c.within(4))
	key := c.key()
	b := c.newLocker()
	a, label := c.labelled("inspect-holder")

	st, err := locker.Inspect(ctx, b, key)
	if errors.Is(err, errors.ErrUnsupported) {
		c.Skipf("the Locker cannot inspect: %v", err)
	}
	if err != nil || st.Held {
		c.Fatalf("%s: Inspect of a free key = %+v, %v; want not held", contract, st, err)
	}
	before := time.Now()
	lk := c.mustTryLock(ctx, a, key, contract)
	if st, err = locker.Inspect(ctx, b, key); err != nil {
		c.Fatalf("%s: Inspect of a held key: %v", contract, err)
	}
	switch {
	case !st.Held:
		c.Errorf("%s: Inspect of a held key = %+v; want held", contract, st)
	case st.Token != lk.Token():
		c.Errorf("%s: Inspect's token %d, the holder's %d", contract, st.Token, lk.Token())
	case label != "" && st.Label != label:
		c.Errorf("%s: Inspect's label %q, the holder's %q", contract, st.Label, label)
	case !st.Acquired.IsZero() && (st.Acquired.Before(before.Add(-time.Minute)) || st.Acquired.After(time.Now().Add(time.Minute))):
		c.Errorf("%s: acquired at %v, the lock was taken at %v (a minute either way allowed for the store's clock)", contract, st.Acquired, before)
	case !st.Expires.IsZero() && !st.Expires.After(st.Acquired) && !st.Acquired.IsZero():
		c.Errorf("%s: expires at %v, before it was acquired at %v", contract, st.Expires, st.Acquired)
	}
	// A waiter, for the stores that count them.
	wctx, cancel := context.WithCancel(ctx)
	res := lockAsync(wctx, b, key)
	time.Sleep(c.pause())
	if st, err := locker.Inspect(ctx, b, key); err == nil {
		c.Logf("with one Lock waiting, Inspect reports %d waiters", st.Waiters)
	}
	cancel()
	if r := <-res; r.err == nil {
		c.Errorf("%s: the waiter got the held key", contract)
		_ = r.lk.Unlock(ctx)
	}
	c.unlock(ctx, lk, contract)
	for {
		st, err := locker.Inspect(ctx, b, key)
		if err == nil && !st.Held {
			return
		}
		if !sleep(ctx, c.every()) {
			c.Fatalf("%s: the key still shows held after Unlock: %+v, %v", contract, st, err)
		}
	}
}
