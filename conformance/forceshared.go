package conformance

import (
	"context"
	"errors"

	"github.com/golocker/locker"
)

// forcedHolders is how many permits ForceUnlockShared forces free at once:
// more than a store takes in one operation (etcd: 128 by default).
const forcedHolders = 200

// testForceUnlockShared takes forcedHolders permits of one semaphore and
// forces the key free from another Locker: Inspect shows no holder left,
// every permit's Done closes, and all the permits can be taken again at
// once.
func testForceUnlockShared(c *caseT) {
	contract := c.contract
	ctx := c.ctx(c.within(5))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()
	sa := c.semaphore(a, key, forcedHolders)
	permits := make([]locker.Lock, 0, forcedHolders)
	for range forcedHolders {
		p, err := sa.TryAcquire(ctx)
		if err != nil {
			c.Fatalf("%s: TryAcquire %d of %d on a semaphore with room for it: %v", contract, len(permits)+1, forcedHolders, err)
		}
		permits = append(permits, p)
	}
	err := locker.ForceUnlock(ctx, b, key)
	if errors.Is(err, errors.ErrUnsupported) {
		c.Skipf("the Locker cannot force an unlock: %v", err)
	}
	if err != nil {
		c.Fatalf("%s: ForceUnlock of a semaphore with %d holders: %v", contract, forcedHolders, err)
	}
	// At once, before a starved renewal could let a permit expire.
	st, err := locker.Inspect(ctx, b, key)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
	case err != nil:
		c.Errorf("%s: Inspect after ForceUnlock: %v", contract, err)
	case len(st.Holders) > 0:
		c.Fatalf("%s: %d holders of %d left after ForceUnlock returned", contract, len(st.Holders), forcedHolders)
	}
	sb := c.semaphore(b, key, forcedHolders)
	all, err := pollTry(ctx, c.every(), func(ctx context.Context, opts ...locker.LockOption) (locker.Lock, error) {
		return sb.TryAcquireN(ctx, forcedHolders, opts...)
	})
	if err != nil {
		c.Fatalf("%s: all %d permits could not be taken again after ForceUnlock: %v", contract, forcedHolders, err)
	}
	for i, p := range permits {
		select {
		case <-p.Done():
		case <-ctx.Done():
			c.Fatalf("%s: permit %d of %d: Done still open after ForceUnlock", contract, i+1, forcedHolders)
		}
		if err := p.Err(); !errors.Is(err, locker.ErrLost) {
			c.Errorf("%s: permit %d of %d: Err = %v after ForceUnlock; want ErrLost", contract, i+1, forcedHolders, err)
			break
		}
	}
	c.unlock(ctx, all, contract)
}
