package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

// sharedFreed is the contract of SharedKeyFreed.
const sharedFreed = "once the last shared holder of a key left, by Unlock or by a crash, the key must be free for a multi-key lock and a plain lock"

// testSharedKeyFreed lets the only permit of a semaphore go, once by
// Unlock and once by a crash, and checks that another Locker then takes
// the key with TryLockMulti (beside a fresh key), and then with TryLock:
// at once after the Unlock, within one TTL of the crash.
func testSharedKeyFreed(c *caseT) {
	ctx := c.ctx(c.within(4))
	hows := []string{"released"}
	if c.h.Crash != nil {
		hows = append(hows, "crashed")
	} else {
		c.Logf("Harness.Crash is nil: only a released permit is checked")
	}
	for _, how := range hows {
		key, other := c.key(), c.key()
		a, b := c.newLocker(), c.newLocker()
		p, err := c.semaphore(a, key, 2).TryAcquire(ctx)
		if err != nil {
			c.Fatalf("%s: TryAcquire on a free semaphore: %v", withinLimit, err)
		}
		if how == "crashed" {
			c.h.Crash(c.t, a)
		} else {
			c.unlock(ctx, p, sharedFreed)
		}

		// Until the crashed holder's permit expires, the key is a
		// semaphore: a refusal (ErrNotAcquired or ErrInvalidOption) is
		// right then, and wrong once the permit is gone. Once Inspect
		// shows the key free, the first try must get it.
		wait := time.Duration(0)
		if how == "crashed" {
			wait = c.within(1)
			if c.freedWithin(ctx, b, key, wait) {
				wait = 0
			}
		}
		end := time.Now().Add(wait)
		var m multiLock
		for {
			m, err = c.lockMulti(ctx, b, []string{key, other}, false)
			if err == nil || time.Now().After(end) ||
				!errors.Is(err, locker.ErrNotAcquired) && !errors.Is(err, locker.ErrInvalidOption) || !sleep(ctx, c.every()) {
				break
			}
		}
		if err != nil {
			c.Fatalf("%s: the only permit of a semaphore %s; then TryLockMulti of its key and a fresh one: %v", sharedFreed, how, err)
		}
		if tok := m.Token(key); tok <= p.Token() {
			c.Errorf("%s: TryLockMulti of a semaphore's freed key got token %d, not above the permit's %d", sharedFencing, tok, p.Token())
		}
		if err := m.Unlock(ctx); err != nil {
			c.Errorf("%s: Unlock of the MultiLock: %v", sharedFreed, err)
		}
		lk, err := b.TryLock(ctx, key)
		if err != nil {
			c.Fatalf("%s: the only permit of a semaphore %s; then TryLock of its key, after a MultiLock of it was unlocked: %v", sharedFreed, how, err)
		}
		c.unlock(ctx, lk, sharedFreed)
	}
}

// freedWithin polls Inspect until key is not held, for at most d. It
// reports false when l cannot inspect, or the key stayed held.
func (c *caseT) freedWithin(ctx context.Context, l locker.Locker, key string, d time.Duration) bool {
	c.Helper()
	end := time.Now().Add(d)
	for {
		st, err := locker.Inspect(ctx, l, key)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			return false
		case err != nil:
			c.Fatalf("Inspect of a semaphore's key whose only holder crashed: %v", err)
		case !st.Held:
			return true
		}
		if time.Now().After(end) || !sleep(ctx, c.every()) {
			return false
		}
	}
}
