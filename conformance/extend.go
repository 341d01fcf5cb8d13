package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

// extended is the contract of locker.Extend that testExtend checks.
const extended = "locker.Extend changes a held lock's MaxHold and MinHold, counting from the call"

// testExtend: a lock taken with MaxHold(TTL) and extended to MaxHold(3 TTL)
// is still held (and refused to others) past the first MaxHold; lowered
// to MaxHold(TTL/2), it ends then with ErrMaxHold, Deadline no later, and
// another Locker gets the key. A lock given MinHold(TTL) by Extend keeps
// its key claimed after an early Unlock until TTL after the call. Extend
// refuses TTL, and fails with ErrNotHeld after Unlock. Skipped for a Lock
// that is not a locker.Extender.
func testExtend(c *caseT) {
	ttl := c.h.TTL
	ctx := c.ctx(c.within(10))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	start := time.Now()
	lk, err := a.TryLock(ctx, key, locker.MaxHold(ttl))
	c.optionRefused(err, "MaxHold")
	if err != nil {
		c.Fatalf("%s: TryLock with MaxHold on a free key: %v", extended, err)
	}
	err = locker.Extend(ctx, lk, locker.MaxHold(3*ttl))
	if errors.Is(err, errors.ErrUnsupported) {
		_ = lk.Unlock(ctx)
		c.Skipf("the Lock cannot extend: %v", err)
	}
	if err != nil {
		c.Fatalf("%s: Extend(MaxHold(3 TTL)) of a held lock: %v", extended, err)
	}
	raised := time.Now()
	if dl := lk.Deadline(); dl.After(raised.Add(3 * ttl)) {
		c.Errorf("%s: Deadline() is %v after Extend(MaxHold(%v))", extended, dl.Sub(raised).Round(time.Millisecond), 3*ttl)
	}
	// Past the first MaxHold, the lock is still held.
	if !sleep(ctx, time.Until(start.Add(ttl+ttl/2))) {
		c.Fatalf("%s: the case ran out of time", extended)
	}
	if !c.held(lk, extended+" (raised MaxHold)") || !c.refusedWhileHeld(ctx, b, lk, extended+" (raised MaxHold)") {
		c.stop()
	}

	// Lowered: the lock ends at the new MaxHold.
	if err := locker.Extend(ctx, lk, locker.MaxHold(ttl/2)); err != nil {
		c.Fatalf("%s: Extend(MaxHold(TTL/2)) of a held lock: %v", extended, err)
	}
	lowered := time.Now()
	if dl := lk.Deadline(); dl.After(lowered.Add(ttl / 2)) {
		c.Errorf("%s: Deadline() is %v after Extend(MaxHold(%v))", extended, dl.Sub(lowered).Round(time.Millisecond), ttl/2)
	}
	select {
	case <-lk.Done():
	case <-time.After(c.within(1)):
		c.Fatalf("%s: the lock is still held %v after Extend(MaxHold(%v))", extended, c.within(1), ttl/2)
	}
	if err := lk.Err(); !errors.Is(err, locker.ErrMaxHold) {
		c.Errorf("%s: Err after the lowered MaxHold = %v, want an error matching ErrMaxHold", extended, err)
	}
	if err := locker.Extend(ctx, lk, locker.MaxHold(ttl)); !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: Extend of an ended lock = %v, want an error matching ErrNotHeld", extended, err)
	}
	pctx, cancel := context.WithTimeout(ctx, c.within(2))
	defer cancel()
	lb, err := pollTryLock(pctx, b, key, c.every())
	if err != nil {
		c.Fatalf("%s: another Locker must get the key within a TTL of the lowered MaxHold: %v", extended, err)
	}
	if err := locker.Extend(ctx, lb, locker.TTL(2*ttl)); !errors.Is(err, locker.ErrInvalidOption) {
		c.Errorf("%s: Extend(TTL) = %v, want an error matching ErrInvalidOption (a held lock's TTL cannot change)", extended, err)
	}

	// MinHold given by Extend keeps the key after an early Unlock.
	before := time.Now()
	err = locker.Extend(ctx, lb, locker.MinHold(ttl))
	if errors.Is(err, locker.ErrInvalidOption) {
		c.Logf("the backend refuses MinHold: %v", err)
		c.unlock(ctx, lb, extended)
		return
	}
	if err != nil {
		c.Fatalf("%s: Extend(MinHold(TTL)) of a held lock: %v", extended, err)
	}
	if err := lb.Unlock(ctx); err != nil {
		c.Fatalf("%s: Unlock after Extend(MinHold): %v", extended, err)
	}
	if !c.refusedUntil(ctx, a, key, before.Add(ttl), extended+" (MinHold after an early Unlock)") {
		return
	}
	pctx2, cancel2 := context.WithTimeout(ctx, c.within(2))
	defer cancel2()
	lk, err = pollTryLock(pctx2, a, key, c.every())
	if err != nil {
		c.Fatalf("%s: the key must be free once the extended MinHold ended: %v", extended, err)
	}
	c.unlock(ctx, lk, extended)
}
