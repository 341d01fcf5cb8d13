package conformance

import (
	"context"
	"errors"

	"github.com/golocker/locker"
)

// Contracts, quoted by the failure messages.
const (
	handedOver = "an Unlock, Do or TryDo that released a key a Lock was waiting for must return nil (the release happened, whatever the store did besides)"
	triedOnly  = "TryLock on a key that is held, or being passed on to a waiting Lock, must return an error matching ErrNotAcquired (or the lock, once free), never another error"
)

// testHandOff: releasing a key some Lock waits for is an ordinary release.
// A store that tells waiters through a side channel it may be refused (Redis
// pub/sub under an ACL) must not turn that refusal into an error of the
// release, nor of a TryLock that passes the key on.
func testHandOff(c *caseT) {
	ctx := c.ctx(c.within(8))
	key := c.key()
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()

	// Unlock.
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	res := lockAsync(ctx, b, key)
	sleep(ctx, c.pause()) // b waits
	c.refused(ctx, other, key, triedOnly)
	if err := la.Unlock(ctx); err != nil {
		c.Errorf("%s: Unlock: %v", handedOver, err)
	}
	c.tryOnly(ctx, other, key)
	c.waiterGets(ctx, res)

	// Do and TryDo whose function returns while a Lock waits.
	for _, do := range []struct {
		name string
		fn   func(context.Context, locker.Locker, string, func(context.Context) error, ...locker.LockOption) error
	}{{"Do", locker.Do}, {"TryDo", locker.TryDo}} {
		var res <-chan lockResult
		err := do.fn(ctx, a, key, func(context.Context) error {
			res = lockAsync(ctx, b, key)
			sleep(ctx, c.pause())
			return nil
		})
		if err != nil {
			c.Errorf("%s: %s: %v", handedOver, do.name, err)
		}
		if res == nil {
			c.Fatalf("%s on a free key must run its function", do.name)
		}
		c.tryOnly(ctx, other, key)
		c.waiterGets(ctx, res)
	}

	// A holder that crashed with a Lock waiting: TryLock may find the key
	// expired and pass it on to the waiter.
	if c.h.Crash == nil {
		return
	}
	x := c.newLocker()
	c.mustTryLock(ctx, x, key, "TryLock on a free key must succeed")
	res = lockAsync(ctx, b, key)
	sleep(ctx, c.pause())
	c.h.Crash(c.t, x)
	for {
		select {
		case r := <-res:
			c.tryOnly(ctx, other, key)
			if r.err != nil {
				c.Fatalf("a waiting Lock must get the key once its crashed holder's TTL ran out: %v", r.err)
			}
			c.unlock(ctx, r.lk, heldUntil)
			return
		default:
		}
		c.tryOnly(ctx, other, key)
		if !sleep(ctx, c.every()) {
			c.Fatalf("a waiting Lock must get the key once its crashed holder's TTL ran out: %v", ctx.Err())
		}
	}
}

// tryOnly checks that TryLock of key by other returns the lock or an error
// matching ErrNotAcquired; a lock it gets is released at once.
func (c *caseT) tryOnly(ctx context.Context, other locker.Locker, key string) {
	c.Helper()
	lk, err := other.TryLock(ctx, key)
	switch {
	case err == nil:
		c.unlock(ctx, lk, heldUntil)
	case !errors.Is(err, locker.ErrNotAcquired):
		c.Errorf("%s: %v", triedOnly, err)
	}
}

// waiterGets checks that the waiting Lock of res gets the key, and releases
// it.
func (c *caseT) waiterGets(ctx context.Context, res <-chan lockResult) {
	c.Helper()
	r := <-res // ends by itself at the case's deadline
	if r.err != nil {
		c.Fatalf("a waiting Lock must get the key once its holder released it: %v", r.err)
	}
	c.unlock(ctx, r.lk, heldUntil)
}
