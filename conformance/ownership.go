package conformance

import (
	"errors"

	"github.com/golocker/locker"
)

func testOwnership(c *caseT) {
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	if err := la.Unlock(ctx); err != nil {
		c.Fatalf("Unlock of a held lock must succeed: %v", err)
	}
	if err := la.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: a second Unlock of the same lock: got %v", ownership, err)
	}

	lb := c.mustTryLock(ctx, b, key, freeAfter)
	if err := la.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: Unlock of a stale handle while another Locker holds the key: got %v", ownership, err)
	}
	c.held(lb, ownership+" (the current holder)")
	c.refused(ctx, other, key, ownership+" (the current holder must still hold the key)")

	// Two concurrent Unlocks of one lock: exactly one succeeds.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- lb.Unlock(ctx) }()
	}
	e1, e2 := <-errs, <-errs
	if (e1 == nil) == (e2 == nil) || !errors.Is(errors.Join(e1, e2), locker.ErrNotHeld) {
		c.Errorf("%s: two concurrent Unlocks of one lock must give one nil and one ErrNotHeld: got %v and %v", ownership, e1, e2)
	}
	lk := c.mustTryLock(ctx, other, key, freeAfter)
	c.unlock(ctx, lk, heldUntil)
}

func testOwnershipAfterCrash(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a holder")
	ctx := c.ctx(c.within(4))
	key := c.key()
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.h.Crash(c.t, a)
	lb, err := pollTryLock(ctx, b, key, c.every())
	if err != nil {
		c.Fatalf("a crashed holder's key must become free after its TTL: %v", err)
	}
	c.doneClosed(la, doneBeforeFree+" (the crashed holder's lock)")
	if err := la.Err(); !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: the crashed holder's Err = %v, want an error matching ErrLost", doneBeforeFree, err)
	}
	if err := la.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: the crashed holder's stale Unlock: got %v", ownership, err)
	}
	c.held(lb, ownership+" (the new holder)")
	c.refused(ctx, other, key, ownership+" (the new holder must still hold the key)")
	c.unlock(ctx, lb, heldUntil)
}
