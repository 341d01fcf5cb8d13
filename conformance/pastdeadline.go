package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

// pastDeadline is the contract of testUnlockPastDeadline.
const pastDeadline = "past its Deadline a lock is lost, whatever the store still holds: Unlock and Extend must fail with an error matching ErrNotHeld and ErrLost, as Err reports, and Done be closed"

// testUnlockPastDeadline: a holder cut off from the store unlocks the
// moment its Deadline passed, without having asked Done or Err: the
// Unlock reports the loss (the store may still hold the lock for the rest
// of its TTL, and the Locker's own timer may not have ended it yet), Err
// matches ErrLost and Done is closed; once healed, the key frees for
// another Locker. The same for Extend, of a second lock, when the
// Locker's Locks are locker.Extenders: it must not renew a lost lock back
// to life.
func testUnlockPastDeadline(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(4))
	key, key2 := c.key(), c.key()
	a, b := c.newLocker(), c.newLocker()
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	la2 := c.mustTryLock(ctx, a, key2, "TryLock on a free key must succeed")
	heal := c.isolate(a)

	c.awaitDeadline(ctx, la)
	c.lostPastDeadline(la, "Unlock", la.Unlock(ctx))
	c.awaitDeadline(ctx, la2)
	if err := locker.Extend(ctx, la2, locker.MaxHold(10*c.h.TTL)); errors.Is(err, errors.ErrUnsupported) {
		c.Logf("the Lock cannot extend: %v", err)
		_ = la2.Unlock(ctx)
	} else {
		c.lostPastDeadline(la2, "Extend", err)
	}
	heal()
	for _, k := range []string{key, key2} {
		lb, err := pollTryLock(ctx, b, k, c.every())
		if err != nil {
			c.Fatalf("the key of a lock lost at its Deadline must become free for others: %v", err)
		}
		c.unlock(ctx, lb, heldUntil)
	}
}

// spinBefore is how long before a Deadline awaitDeadline stops sleeping
// and spins.
const spinBefore = 2 * time.Millisecond

// awaitDeadline returns the moment lk's Deadline has passed, asking only
// Deadline (Done and Err end an overdue lock themselves). It spins the
// last spinBefore, so that the caller acts before the Locker's own timer,
// which a sleep would hand the race to.
func (c *caseT) awaitDeadline(ctx context.Context, lk locker.Lock) {
	for {
		deadline := lk.Deadline()
		wait := time.Until(deadline)
		switch {
		case wait <= 0:
			return
		case wait > spinBefore:
			// A renewal sent before the cut may still move it on.
			if !sleep(ctx, wait-spinBefore) {
				c.Fatalf("%s: the isolated holder's Deadline kept moving: %v", pastDeadline, lk.Deadline())
			}
		default:
			for time.Now().Before(deadline) {
			}
		}
	}
}

// lostPastDeadline checks what call (Unlock or Extend) of lk past its
// Deadline returned, and lk's Err and Done after it.
func (c *caseT) lostPastDeadline(lk locker.Lock, call string, err error) {
	c.Helper()
	if !errors.Is(err, locker.ErrNotHeld) || !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: %s past the Deadline: got %v", pastDeadline, call, err)
	}
	if err := lk.Err(); !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: Err after %s past the Deadline: got %v", pastDeadline, call, err)
	}
	c.doneClosed(lk, pastDeadline+" (after "+call+")")
}

// extendedHeld is the contract of testExtendWhileRenewed.
const extendedHeld = "Extend of a held lock must not fail while the lock stays held and its ctx lives: a store call cut short by the lock's own deadline, which renewals keep moving, is no failure; Extend fails with ErrNotHeld only once the lock has ended"

// testExtendWhileRenewed: Extend, called again and again over two TTLs
// while the Locker renews the lock, succeeds every time on a store that
// answers; an Extend that failed with ErrNotHeld must find Done closed. A
// lock lost as the contract allows (a loaded machine starves renewals)
// sends the case round again, on a new key; it fails when the lock is lost
// in all three rounds. Skipped for a Lock that is not a locker.Extender.
func testExtendWhileRenewed(c *caseT) {
	const rounds = 3
	ctx := c.ctx(c.within(3*rounds + 1))
	a := c.newLocker()
	for round := 1; ; round++ {
		lk := c.mustTryLock(ctx, a, c.key(), "TryLock on a free key must succeed")
		lost := c.extendWhileRenewed(ctx, lk)
		if lost == nil {
			c.unlock(ctx, lk, heldUntil)
			return
		}
		if round == rounds {
			c.Fatalf("%s: the lock was lost in all %d rounds, the last with %v", extendedHeld, rounds, lost)
		}
		c.Logf("round %d of %d: the lock was lost (%v); again on a new key", round, rounds, lost)
	}
}

// extendWhileRenewed extends lk every TTL/10 for two TTLs, and returns
// the loss that ended it early (nil: none).
func (c *caseT) extendWhileRenewed(ctx context.Context, lk locker.Lock) error {
	ttl := c.h.TTL
	for stop := time.Now().Add(2 * ttl); time.Now().Before(stop); {
		err := locker.Extend(ctx, lk, locker.MaxHold(10*ttl))
		switch {
		case err == nil:
		case errors.Is(err, errors.ErrUnsupported):
			_ = lk.Unlock(ctx)
			c.Skipf("the Lock cannot extend: %v", err)
		case ctx.Err() != nil:
			c.Fatalf("%s: the case ran out of time: %v", extendedHeld, err)
		case errors.Is(err, locker.ErrNotHeld):
			select {
			case <-lk.Done():
				return lk.Err()
			default:
				c.Fatalf("%s: Extend failed with %v while Done is open", extendedHeld, err)
			}
		default:
			c.Fatalf("%s: Extend failed with %v (Err = %v)", extendedHeld, err, lk.Err())
		}
		if lk.Err() != nil {
			return lk.Err()
		}
		sleep(ctx, ttl/10)
	}
	return nil
}
