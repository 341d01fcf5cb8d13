package conformance

import (
	"context"
	"errors"

	"github.com/golocker/locker"
)

// testLossAfterRenewal forces free, from another Locker, a lock that was
// renewed (deletes it behind its holder's back, for a Locker that cannot
// force an unlock), and a semaphore with two permits of one Locker: the
// first renewed, the second taken after that renewal. Each holder's Done
// must close. A Locker that reads its keys until their first renewal, and then
// trusts a watch of the store that misses some deletions (it started late,
// or it covers only the keys it saw first), fails here and passes
// LossDeleteBehind, whose deletion comes before any renewal.
func testLossAfterRenewal(c *caseT) {
	contract := c.contract
	ctx := c.ctx(c.within(8))
	a, b := c.newLocker(), c.newLocker()

	key := c.key()
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.awaitRenewal(ctx, la, "the lock")
	c.free(ctx, b, key, true)
	c.awaitLoss(ctx, la, contract+" (a lock renewed before it was forced free)")

	sa, err := locker.NewSemaphore(a, c.key(), 2)
	if err != nil {
		if unshared(err) {
			c.Logf("the Locker has no shared holds: the case checked the lock only: %v", err)
			return
		}
		c.Fatalf("locker.NewSemaphore: %v", err)
	}
	first, err := sa.TryAcquire(ctx)
	if err != nil {
		c.Fatalf("%s: TryAcquire on a free semaphore: %v", withinLimit, err)
	}
	c.awaitRenewal(ctx, first, "the first permit")
	second, err := sa.TryAcquire(ctx)
	if err != nil {
		c.Fatalf("%s: TryAcquire of a second permit of 2: %v", withinLimit, err)
	}
	c.free(ctx, b, sa.Key(), false)
	c.awaitLoss(ctx, first, contract+" (a permit renewed before its key was forced free)")
	c.awaitLoss(ctx, second, contract+" (a permit taken after another permit of the same Locker and key was renewed)")
}

// awaitRenewal waits until lk's Deadline moved: a renewal landed.
func (c *caseT) awaitRenewal(ctx context.Context, lk locker.Lock, what string) {
	c.Helper()
	first := lk.Deadline()
	for !lk.Deadline().After(first) {
		select {
		case <-lk.Done():
			c.Fatalf("a held lock must be renewed until it is unlocked: %s was lost before its first renewal: %v", what, lk.Err())
		default:
		}
		if !sleep(ctx, c.every()) {
			c.Fatalf("a held lock must be renewed until it is unlocked: the Deadline of %s never moved", what)
		}
	}
}

// free forces key free from l. When l cannot, a plain lock's key
// (plain) is deleted behind its holder's back, if the harness can; else
// the case skips.
func (c *caseT) free(ctx context.Context, l locker.Locker, key string, plain bool) {
	c.Helper()
	err := locker.ForceUnlock(ctx, l, key)
	if errors.Is(err, errors.ErrUnsupported) {
		if plain && c.h.DeleteBehind != nil {
			c.h.DeleteBehind(c.t, key)
			return
		}
		c.Skipf("the Locker cannot force an unlock: %v", err)
	}
	if err != nil {
		c.Fatalf("ForceUnlock of a held key: %v", err)
	}
}

// awaitLoss waits for lk's Done, within two TTLs, and checks its Err.
func (c *caseT) awaitLoss(ctx context.Context, lk locker.Lock, contract string) {
	c.Helper()
	wctx, cancel := context.WithTimeout(ctx, c.within(2))
	defer cancel()
	select {
	case <-lk.Done():
	case <-wctx.Done():
		c.Fatalf("%s: Done still open %v after the key was forced free", contract, c.within(2))
	}
	if err := lk.Err(); !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: Err = %v; want an error matching ErrLost", contract, err)
	}
}
