package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker"
)

// scaleAttempts is how many times Scale holds its keys before it fails for
// locks lost on the way (see scaleOnce).
const scaleAttempts = 3

func testScale(c *caseT) {
	ctx := c.ctx(c.within(8) + 6*c.slack)
	a, b := c.newLocker(), c.newLocker()
	var loss error
	for i := range scaleAttempts {
		if loss = c.scaleOnce(ctx, a, b); loss == nil {
			return
		}
		c.Logf("attempt %d of %d lost locks (a stall of the renewals?): %v", i+1, scaleAttempts, loss)
	}
	c.Fatalf("%s: locks were lost in all %d attempts, the last time: %v", c.contract, scaleAttempts, loss)
}

// scaleOnce is one attempt of Scale on keys of its own: a takes them all,
// keeps them past two TTLs while b is refused, and unlocks them. It
// reports broken promises (b granted a key whose holder's Done is open, an
// Unlock that fails while the Lock's Deadline is ahead) and ends the case.
// A lock lost as the contract allows (its Done closed, or its Deadline
// passed before the store found it gone) ends the attempt and is returned:
// renewals starved on a loaded machine lose locks so, and so does a Locker
// that does not renew, in every attempt.
func (c *caseT) scaleOnce(ctx context.Context, a, b locker.Locker) error {
	const n, sample, workers = 1000, 50, 16
	base := c.key()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%04d", base, i)
	}
	locks := make([]locker.Lock, n)
	var errs errList
	parallel(n, workers, func(i int) {
		lk, err := a.Lock(ctx, keys[i])
		if err != nil {
			errs.add(fmt.Errorf("Lock(%s): %w", short(keys[i]), err))
			return
		}
		locks[i] = lk
	})
	if !errs.report(c, fmt.Sprintf("one Locker must be able to hold %d keys at once", n)) {
		c.stop()
	}
	// unlockAll gives back what is still held after a loss.
	unlockAll := func() {
		parallel(n, workers, func(i int) { _ = locks[i].Unlock(ctx) })
	}
	since := time.Now()
	sampled := func(yield func(int) bool) {
		for s := range sample {
			if !yield(s * n / sample) {
				return
			}
		}
	}
	contract := c.contract
	refused := func(when string) error {
		for i := range sampled {
			lk := locks[i]
			got, err := b.TryLock(ctx, lk.Key())
			if err != nil {
				if !c.refusedErr(lk.Key(), err, contract+when) {
					c.stop()
				}
				continue
			}
			select {
			case <-lk.Done():
				_ = got.Unlock(ctx)
				return fmt.Errorf("the holder lost its lock on %s (Err: %w), then another Locker's TryLock got the key", short(lk.Key()), lk.Err())
			default:
				c.grantedWhileHeld(ctx, lk, got, "TryLock", contract+when)
				c.stop()
			}
		}
		return nil
	}
	if err := refused(""); err != nil {
		unlockAll()
		return err
	}
	// Keep them all past two TTLs, checking every TTL/2.
	for time.Since(since) < 2*c.h.TTL+c.h.TTL/4 {
		if !sleep(ctx, c.h.TTL/2) {
			c.Fatalf("%s: the case ran out of time: %v", contract, ctx.Err())
		}
		for _, lk := range locks {
			select {
			case <-lk.Done():
				unlockAll()
				return fmt.Errorf("Done of the lock on %s closed after %v (Err: %w)", short(lk.Key()), time.Since(since).Round(time.Millisecond), lk.Err())
			default:
			}
			if !c.held(lk, contract) {
				c.stop()
			}
		}
	}
	if err := refused(fmt.Sprintf(" (after %v)", time.Since(since).Round(time.Millisecond))); err != nil {
		unlockAll()
		return err
	}
	var losses errList
	parallel(n, workers, func(i int) {
		lk := locks[i]
		deadline := lk.Deadline()
		var signalled bool // the loss, before Unlock
		select {
		case <-lk.Done():
			signalled = true
		default:
		}
		err := lk.Unlock(ctx)
		switch {
		case err == nil:
		case errors.Is(err, locker.ErrNotHeld) && (signalled || !time.Now().Before(deadline)):
			losses.add(fmt.Errorf("Unlock(%s) of a lock lost or past its Deadline: %w", short(keys[i]), err))
		default:
			errs.add(fmt.Errorf("Unlock(%s): %w", short(keys[i]), err))
		}
	})
	if !errs.report(c, "Unlock of each of many held locks must succeed while their Deadline is ahead") {
		c.stop()
	}
	if err := losses.err(); err != nil {
		return err
	}
	for i := range sampled {
		lk, err := b.TryLock(ctx, keys[i])
		if err != nil {
			c.Fatalf("%s: TryLock(%s) from another Locker: %v", freeAfter, short(keys[i]), err)
		}
		c.unlock(ctx, lk, heldUntil)
	}
	return nil
}
