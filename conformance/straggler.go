package conformance

import (
	"sync"
	"time"

	"github.com/golocker/locker"
)

// The case of this file slows one store node for a Locker whose TryLock
// is refused: its request to that node is still on its way when the other
// nodes' answers settle the refusal, and may reach the node after the
// holder's Unlock freed the key there (a straggler). A quorum's worth of
// such stragglers, each on its own node, would hold the key against the
// next Locker after the Unlock.

// noStraggler is the contract of RefusedStraggler.
const noStraggler = "a TryLock refused while one store node answered its Locker late must leave nothing that holds the key once it returned: after the holder's Unlock the key is free for the next Locker at once"

func testRefusedStraggler(c *caseT) {
	c.need("Slow", c.h.Slow != nil, "slow down one store node for one Locker")
	if c.h.Nodes < 3 {
		c.Skipf("Harness.Nodes is %d: the case slows one node for each of a quorum of Lockers, and needs at least 3", c.h.Nodes)
	}
	ctx := c.ctx(c.within(4))
	key := c.key()
	a, next := c.newLocker(), c.newLocker()
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")

	// A quorum's worth of refused Lockers, each slow on a node of its own.
	// A request that reaches its node d late, after the Unlock below,
	// finds the key free there; an implementation that leaves such
	// requests to run after the TryLock returned must undo what they
	// took, which its reply, d later still, tells it.
	// Each Locker is refused once before its node turns slow, so that its
	// connections are made and its late request is the TryLock's own.
	d := c.pause() / 2
	refusing := make([]locker.Locker, c.h.Nodes/2+1)
	for i := range refusing {
		refusing[i] = c.newLocker()
		c.refusedWhileHeld(ctx, refusing[i], la, "TryLock from another Locker on a held key must fail with ErrNotAcquired")
	}
	for node, l := range refusing {
		c.t.Cleanup(c.h.Slow(c.t, l, node, d))
	}
	// At once, so that the Unlock comes before the late requests arrive.
	start := time.Now()
	errs := make([]error, len(refusing))
	got := make([]locker.Lock, len(refusing))
	var wg sync.WaitGroup
	for i, l := range refusing {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = l.TryLock(ctx, key)
		}()
	}
	wg.Wait()
	c.Logf("the slow Lockers' TryLocks returned %v after they began", time.Since(start).Round(time.Millisecond))
	for i, err := range errs {
		if err == nil {
			// Says whether the holder had lost its lock (its renewals
			// starved) or two held the key at once.
			c.grantedWhileHeld(ctx, la, got[i], "TryLock", "TryLock from another Locker on a held key must fail with ErrNotAcquired")
			continue
		}
		c.refusedErr(key, err, "TryLock from another Locker on a held key must fail with ErrNotAcquired")
	}
	c.unlock(ctx, la, heldUntil)
	unlocked := time.Now()
	// By now the late requests of TryLocks that returned at once have
	// reached their nodes, and their replies have not come back.
	sleep(ctx, time.Until(start.Add(2*d)))
	lb, err := next.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("%s: TryLock %v after the holder's Unlock: %v", noStraggler, time.Since(unlocked).Round(time.Millisecond), err)
	}
	c.unlock(ctx, lb, heldUntil)
}
