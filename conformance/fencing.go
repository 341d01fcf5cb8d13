package conformance

import (
	"context"

	"github.com/golocker/locker"
)

func testFencing(c *caseT) {
	const holders = 100
	ctx := c.ctx(c.forCalls(2 * holders))
	key := c.key()
	ls := []locker.Locker{c.newLocker(), c.newLocker(), c.newLocker(), c.newLocker()}
	var prev uint64
	for i := range holders {
		lk, err := ls[i%len(ls)].TryLock(ctx, key)
		if err != nil {
			c.Fatalf("%s: TryLock of holder %d: %v", freeAfter, i, err)
		}
		if tok := lk.Token(); tok <= prev {
			c.Errorf("%s: holder %d got token %d after token %d", fencing, i, tok, prev)
		}
		prev = lk.Token()
		if err := lk.Unlock(ctx); err != nil {
			c.Fatalf("Unlock of a held lock must succeed: %v", err)
		}
	}
}

func testFencingAfterCrash(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a holder")
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.h.Crash(c.t, a)
	lb, err := pollTryLock(ctx, b, key, c.every())
	if err != nil {
		c.Fatalf("a crashed holder's key must become free after its TTL: %v", err)
	}
	if lb.Token() <= la.Token() {
		c.Errorf("%s: the holder after a crash got token %d after the crashed holder's %d", fencing, lb.Token(), la.Token())
	}
	c.unlock(ctx, lb, heldUntil)
}

func testFencingAfterRestart(c *caseT) {
	c.need("Restart", c.h.Restart != nil, "restart the store")
	ctx := c.ctx(c.within(6) + 2*c.slack)
	key := c.key()
	a := c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.unlock(ctx, la, heldUntil)
	c.h.Restart(c.t)
	// The store may come back without its locks, but never with lower
	// tokens. A fresh Locker stands for a replica started after the restart;
	// the old one must work again too.
	for i, l := range []locker.Locker{c.newLocker(), a} {
		lk, err := pollWhile(ctx, c.every(), notFinal, func(ctx context.Context) (locker.Lock, error) {
			return l.TryLock(ctx, key)
		})
		if err != nil {
			c.Fatalf("after a store restart, the key must be acquirable again (Locker %d): %v", i, err)
		}
		if lk.Token() <= la.Token() {
			c.Errorf("%s: after a store restart the key got token %d after token %d", fencing, lk.Token(), la.Token())
		}
		c.unlock(ctx, lk, heldUntil)
		la = lk
	}
}
