package conformance

import (
	"errors"
	"time"

	"github.com/golocker/locker"
)

// testForceUnlock: ForceUnlock of a free key fails with ErrNotHeld; of a
// held key it frees the key for another Locker, closes the holder's Done
// (by its next renewal at the latest) with Err matching ErrLost, and hands
// the key to a waiting Lock.
func testForceUnlock(c *caseT) {
	contract := c.contract
	ctx := c.ctx(c.within(5))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	err := locker.ForceUnlock(ctx, b, key)
	if errors.Is(err, errors.ErrUnsupported) {
		c.Skipf("the Locker cannot force an unlock: %v", err)
	}
	if !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: ForceUnlock of a free key = %v; want an error matching ErrNotHeld", contract, err)
	}

	la := c.mustTryLock(ctx, a, key, contract)
	if err := locker.ForceUnlock(ctx, b, key); err != nil {
		c.Fatalf("%s: ForceUnlock of a held key: %v", contract, err)
	}
	lb, err := pollTryLock(ctx, b, key, c.every())
	if err != nil {
		c.Fatalf("%s: the key stayed taken after ForceUnlock: %v", contract, err)
	}
	select {
	case <-la.Done():
	case <-ctx.Done():
		c.Fatalf("%s: the old holder's Done still open after %v", contract, c.within(5))
	}
	if err := la.Err(); !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: the old holder's Err = %v; want ErrLost", contract, err)
	}

	// A waiter gets the key when it is forced free.
	res := lockAsync(ctx, a, key)
	time.Sleep(c.pause())
	if err := locker.ForceUnlock(ctx, a, key); err != nil {
		c.Fatalf("%s: ForceUnlock with a waiter: %v", contract, err)
	}
	r := <-res
	if r.err != nil {
		c.Fatalf("%s: the waiting Lock did not get the key: %v", contract, r.err)
	}
	select {
	case <-lb.Done():
	case <-ctx.Done():
		c.Fatalf("%s: the second holder's Done still open after %v", contract, c.within(5))
	}
	c.unlock(ctx, r.lk, contract)
}
