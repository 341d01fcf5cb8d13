package conformance

import (
	"context"
	"time"
)

// multiUnlockFrees is the contract of MultiUnlock.
const multiUnlockFrees = "once a MultiLock's Unlock returned nil, every key must be free: a Lock waiting on a key must get it, and another Locker must take each other key, within TTL/2"

// testMultiUnlock: Unlock of a MultiLock frees every key, those with
// waiters and those without.
func testMultiUnlock(c *caseT) {
	ctx := c.ctx(c.within(2))
	keys := c.multiKeys(4)
	holder, waiter, other := c.newLocker(), c.newLocker(), c.newLocker()
	m, err := c.lockMulti(ctx, holder, keys, true)
	if err != nil {
		c.Fatalf("LockMulti on free keys must succeed: %v", err)
	}
	// A waiting Lock on the first and the third key; the others are
	// taken by TryLock after the Unlock.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waits := map[string]<-chan lockResult{keys[0]: lockAsync(wctx, waiter, keys[0]), keys[2]: lockAsync(wctx, waiter, keys[2])}
	if !sleep(ctx, c.every()) { // let the waits find the keys held
		c.Fatalf("the case's deadline passed")
	}
	if err := m.Unlock(ctx); err != nil {
		c.Fatalf("Unlock of a held MultiLock must succeed: %v", err)
	}
	after, stop := context.WithTimeout(ctx, c.h.TTL/2)
	defer stop()
	for _, k := range keys {
		if res, ok := waits[k]; ok {
			select {
			case r := <-res:
				if r.err != nil {
					c.Fatalf("%s: the Lock waiting on %s failed: %v", multiUnlockFrees, short(k), r.err)
				}
				c.unlock(ctx, r.lk, heldUntil)
			case <-after.Done():
				c.Fatalf("%s: the Lock waiting on %s did not get it within %v", multiUnlockFrees, short(k), c.h.TTL/2)
			}
			continue
		}
		lk, err := c.soonTryLock(ctx, other, k, time.Now(), c.h.TTL/2)
		if err != nil {
			c.Fatalf("%s: TryLock(%s) from another Locker: %v", multiUnlockFrees, short(k), err)
		}
		c.unlock(ctx, lk, heldUntil)
	}
}
