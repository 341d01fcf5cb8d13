package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

// The cases of the per-lock options: MinHold, MaxHold and TTL. A backend may
// refuse an option it cannot honour (an error matching ErrInvalidOption): the
// case then skips and says so.

// refusedUntil checks that other cannot take key through any TryLock that
// returns before until (local monotonic clock): the store received and
// answered it before until, when the key must still be claimed. It returns
// when until has passed, or false after reporting a grant.
func (c *caseT) refusedUntil(ctx context.Context, other locker.Locker, key string, until time.Time, contract string) bool {
	c.Helper()
	for time.Now().Before(until) {
		lk, err := other.TryLock(ctx, key)
		switch {
		case err == nil && time.Now().Before(until):
			c.Errorf("%s: TryLock(%s) from another Locker succeeded %v before the key's claim ended", contract, short(key), time.Until(until).Round(time.Millisecond))
			_ = lk.Unlock(context.WithoutCancel(ctx))
			return false
		case err == nil:
			// Granted, but its answer came after until: no proof either way.
			_ = lk.Unlock(context.WithoutCancel(ctx))
			return true
		case !errors.Is(err, locker.ErrNotAcquired):
			c.Errorf("%s: TryLock(%s) from another Locker: %v, want an error matching ErrNotAcquired", contract, short(key), err)
			return false
		}
		if !sleep(ctx, min(c.every(), max(time.Until(until), time.Millisecond))) {
			c.Fatalf("%s: the case ran out of time: %v", contract, ctx.Err())
		}
	}
	return true
}

// optionRefused skips the case when err says the backend refuses the option.
func (c *caseT) optionRefused(err error, option string) {
	c.Helper()
	if errors.Is(err, locker.ErrInvalidOption) {
		c.Skipf("the backend refuses %s: %v", option, err)
	}
}

// testMinHold: with MinHold(m), the key stays claimed until m after the
// acquisition, whether its holder unlocked early (through TryDo), or
// crashed before it could unlock; then it is free.
func testMinHold(c *caseT) {
	contract := c.contract
	m := c.h.TTL
	ctx := c.ctx(c.within(10))
	a, b := c.newLocker(), c.newLocker()

	// Unlocked early, by TryDo's release.
	key := c.key()
	start := time.Now()
	ran := false
	err := locker.TryDo(ctx, a, key, func(context.Context) error { ran = true; return nil }, locker.MinHold(m))
	c.optionRefused(err, "MinHold")
	if err != nil || !ran {
		c.Fatalf("%s: TryDo with MinHold on a free key: ran %v, %v", contract, ran, err)
	}
	if !c.refusedUntil(ctx, b, key, start.Add(m), contract+" (after TryDo returned)") {
		return
	}
	lk, err := pollTryLock(ctx, b, key, c.every())
	if err != nil {
		c.Fatalf("%s: the key must be free once its MinHold (and at most a TTL) has passed: %v", contract, err)
	}
	c.unlock(ctx, lk, contract)

	// A crash of the holder, with a MinHold longer than the TTL.
	if c.h.Crash == nil {
		c.Logf("Harness.Crash is nil: MinHold across a crash is not checked")
		return
	}
	key = c.key()
	crashed := c.newLocker()
	m = 2 * c.h.TTL
	start = time.Now()
	if _, err := crashed.TryLock(ctx, key, locker.MinHold(m)); err != nil {
		if errors.Is(err, locker.ErrInvalidOption) {
			c.Logf("the backend refuses a MinHold longer than the TTL (%v): MinHold across a crash is not checked", err)
			return
		}
		c.Fatalf("%s: TryLock with MinHold on a free key: %v", contract, err)
	}
	c.h.Crash(c.t, crashed)
	if !c.refusedUntil(ctx, b, key, start.Add(m), contract+" (after the holder crashed)") {
		return
	}
	if lk, err = pollTryLock(ctx, b, key, c.every()); err != nil {
		c.Fatalf("%s: a crashed holder's key must be free once its MinHold and a TTL have passed: %v", contract, err)
	}
	c.unlock(ctx, lk, contract)
}

// testMaxHold: with MaxHold(d), a holder that runs on past d loses the lock
// at d (Do's function sees its ctx cancelled with cause ErrMaxHold, never
// earlier), and another Locker gets the key after d and at most a TTL.
func testMaxHold(c *caseT) {
	contract := c.contract
	d := c.h.TTL
	ctx := c.ctx(c.within(8))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	start := time.Now()
	var cancelled time.Time
	var cause error
	err := locker.Do(ctx, a, key, func(fctx context.Context) error {
		// A hung job: it runs until its ctx ends, or well past MaxHold.
		timeout := time.NewTimer(d + c.within(2))
		defer timeout.Stop()
		select {
		case <-fctx.Done():
			cancelled, cause = time.Now(), context.Cause(fctx)
		case <-timeout.C:
		}
		return nil
	}, locker.MaxHold(d))
	c.optionRefused(err, "MaxHold")
	if cancelled.IsZero() {
		c.Fatalf("%s: Do's function ran for MaxHold plus two TTLs and more: its ctx was never cancelled (Do: %v)", contract, err)
	}
	if cancelled.Before(start.Add(d)) {
		c.Errorf("%s: the function's ctx was cancelled %v after Do began, before MaxHold %v", contract, cancelled.Sub(start).Round(time.Millisecond), d)
	}
	if !errors.Is(cause, locker.ErrMaxHold) {
		c.Errorf("%s: the function's ctx was cancelled with cause %v, want one matching ErrMaxHold", contract, cause)
	}
	if !errors.Is(err, locker.ErrMaxHold) || !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: Do returned %v, want an error matching ErrLost and ErrMaxHold", contract, err)
	}
	pctx, cancel := context.WithTimeout(ctx, c.within(2))
	defer cancel()
	lk, err := pollTryLock(pctx, b, key, c.every())
	if err != nil {
		c.Fatalf("%s: another Locker must get the key within a TTL of the MaxHold: %v", contract, err)
	}
	c.unlock(ctx, lk, contract)
}

// testLockTTL: a lock taken with TTL(t) outlives a crash of its holder for
// t, not the Locker's TTL, and Deadline reports when Done would close.
func testLockTTL(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a holder")
	contract := c.contract
	ttl := 3 * c.h.TTL
	ctx := c.ctx(c.within(10))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	start := time.Now()
	lk, err := a.TryLock(ctx, key, locker.TTL(ttl))
	c.optionRefused(err, "TTL")
	if err != nil {
		c.Fatalf("%s: TryLock with TTL on a free key: %v", contract, err)
	}
	if dl := lk.Deadline(); !dl.After(time.Now()) || dl.After(start.Add(ttl)) {
		c.Errorf("%s: Deadline() is %v from the acquisition, want in the future and at most the TTL %v", contract, dl.Sub(start).Round(time.Millisecond), ttl)
	}
	c.h.Crash(c.t, a)
	if !c.refusedUntil(ctx, b, key, start.Add(ttl), contract) {
		return
	}
	if lk, err = pollTryLock(ctx, b, key, c.every()); err != nil {
		c.Fatalf("%s: a crashed holder's key must be free once its TTL has passed: %v", contract, err)
	}
	c.unlock(ctx, lk, contract)
}
