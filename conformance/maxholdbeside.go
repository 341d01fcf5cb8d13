package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

const maxHoldBeside = "a lock taken with MaxHold(d) ends d after its acquisition, even when its renewal, and that of another lock its Locker holds, come much later"

// testMaxHoldBesideHeld: a Locker holds a key with a long TTL, whose first
// renewal is far ahead; a second key it takes with the same TTL and
// MaxHold(TTL) still ends then, with ErrMaxHold, well before either
// renewal.
func testMaxHoldBesideHeld(c *caseT) {
	contract := c.contract
	d := c.h.TTL
	late := 2 * c.within(3) // the first renewal of the long lock, at a third of its TTL
	ctx := c.ctx(late + c.within(2))
	a := c.newLocker()

	long, err := a.TryLock(ctx, c.key(), locker.TTL(3*late))
	c.optionRefused(err, "TTL")
	if err != nil {
		c.Fatalf("%s: TryLock with TTL on a free key: %v", contract, err)
	}
	defer c.unlock(context.WithoutCancel(ctx), long, contract)
	time.Sleep(c.pause()) // whatever the Locker plans after the first lock, it has planned
	lk, err := a.TryLock(ctx, c.key(), locker.TTL(3*late), locker.MaxHold(d))
	c.optionRefused(err, "MaxHold")
	if err != nil {
		c.Fatalf("%s: TryLock with MaxHold on a free key: %v", contract, err)
	}
	select {
	case <-lk.Done():
	case <-time.After(d + c.within(2)):
		_ = lk.Unlock(context.WithoutCancel(ctx))
		c.Fatalf("%s: the lock is still held MaxHold %v plus two TTLs and slack after its acquisition, while another lock of its Locker is renewed only after %v", contract, d, late)
	}
	if err := lk.Err(); !errors.Is(err, locker.ErrMaxHold) {
		c.Errorf("%s: the lock ended with %v, want an error matching ErrMaxHold", contract, err)
	}
}
