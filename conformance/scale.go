package conformance

import (
	"fmt"
	"time"

	"github.com/golocker/locker"
)

func testScale(c *caseT) {
	const n, sample, workers = 1000, 50, 16
	ctx := c.ctx(c.within(8) + 6*c.slack)
	base := c.key()
	a, b := c.newLocker(), c.newLocker()

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
	since := time.Now()
	sampled := func(yield func(int) bool) {
		for s := range sample {
			if !yield(s * n / sample) {
				return
			}
		}
	}
	contract := c.contract
	for i := range sampled {
		if !c.refusedWhileHeld(ctx, b, locks[i], contract) {
			c.stop()
		}
	}
	// Keep them all past two TTLs, checking every TTL/2.
	for time.Since(since) < 2*c.h.TTL+c.h.TTL/4 {
		if !sleep(ctx, c.h.TTL/2) {
			c.Fatalf("%s: the case ran out of time: %v", contract, ctx.Err())
		}
		for _, lk := range locks {
			if !c.held(lk, contract) {
				c.stop()
			}
		}
	}
	for i := range sampled {
		if !c.refusedWhileHeld(ctx, b, locks[i], contract+fmt.Sprintf(" (after %v)", time.Since(since).Round(time.Millisecond))) {
			c.stop()
		}
	}
	parallel(n, workers, func(i int) {
		if err := locks[i].Unlock(ctx); err != nil {
			errs.add(fmt.Errorf("Unlock(%s): %w", short(keys[i]), err))
		}
	})
	if !errs.report(c, "Unlock of each of many held locks must succeed") {
		c.stop()
	}
	for i := range sampled {
		lk, err := b.TryLock(ctx, keys[i])
		if err != nil {
			c.Fatalf("%s: TryLock(%s) from another Locker: %v", freeAfter, short(keys[i]), err)
		}
		c.unlock(ctx, lk, heldUntil)
	}
}
