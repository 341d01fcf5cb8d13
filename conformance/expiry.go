package conformance

import (
	"github.com/golocker/locker"
)

func testExpiry(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a holder")
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.h.Crash(c.t, a)
	lb, err := pollTryLock(ctx, b, key, c.every())
	if err != nil {
		c.Fatalf("%s: %v", c.contract, err)
	}
	c.unlock(ctx, lb, heldUntil)
}

func testRenewal(c *caseT) {
	ctx := c.ctx(c.within(6))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	contract := c.contract
	if c.keepsHeld(ctx, 3*c.h.TTL+c.h.TTL/4, b, []locker.Lock{la}, contract) {
		c.unlock(ctx, la, contract)
	}
}
