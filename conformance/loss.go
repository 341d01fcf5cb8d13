package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker"
)

func testLossDeleteBehind(c *caseT) {
	c.need("DeleteBehind", c.h.DeleteBehind != nil, "delete a lock behind its holder's back")
	ctx := c.ctx(c.within(4))
	key := c.key()
	a := c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.h.DeleteBehind(c.t, key)
	contract := c.contract
	select {
	case <-la.Done():
	case <-ctx.Done():
		c.Fatalf("%s: Done still open after %v", contract, c.within(2))
	}
	if err := la.Err(); !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: Err = %v", contract, err)
	}
	if err := la.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: Unlock of the lost lock: got %v", ownership, err)
	}

	// Do cancels its function's ctx with cause ErrLost, and says so.
	key2 := c.key()
	ran := false
	var cause error
	err := locker.Do(ctx, a, key2, func(fctx context.Context) error {
		ran = true
		c.h.DeleteBehind(c.t, key2)
		<-fctx.Done() // fctx ends with ctx at the latest
		cause = context.Cause(fctx)
		return nil
	})
	if !ran {
		c.Fatalf("Do must run its function on a free key: %v", err)
	}
	if !errors.Is(cause, locker.ErrLost) {
		c.Errorf("Do must cancel its function's ctx with a cause matching ErrLost the moment the lock is lost: cause = %v", cause)
	}
	if !errors.Is(err, locker.ErrLost) {
		c.Errorf("when the lock was lost while its function ran, Do must return an error matching ErrLost: got %v", err)
	}
}

func testLossIsolate(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(4))
	key := c.key()
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	healOnce := c.isolate(a)

	var lb locker.Lock
	for lb == nil {
		lk, err := b.TryLock(ctx, key)
		switch {
		case err == nil:
			// The first moment another Locker holds the key.
			lb = lk
			select {
			case <-la.Done():
			default:
				c.Errorf("%s: another Locker got the key while the isolated holder's Done was still open", doneBeforeFree)
			}
		case ctx.Err() != nil:
			c.Fatalf("an isolated holder's key must become free for others after its TTL: %v", err)
		case !errors.Is(err, locker.ErrNotAcquired):
			c.Fatalf("TryLock from a Locker that still reaches the store: %v", err)
		default:
			sleep(ctx, c.every())
		}
	}
	if err := la.Err(); !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: the isolated holder's Err = %v", doneBeforeFree, err)
	}
	healOnce()
	if err := la.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: the healed holder's stale Unlock: got %v", ownership, err)
	}
	c.held(lb, ownership+" (the new holder)")
	c.refused(ctx, other, key, ownership+" (the new holder must still hold the key)")
	c.unlock(ctx, lb, heldUntil)
}

// testDoneAtDeadline: a holder cut off from the store, asked the moment its
// Deadline passed, already reports the loss. A Locker whose Done only
// closes when its timer goroutine gets to run fails this in a process
// short of CPU (a throttled container, a loaded host), where the timer runs
// late and the holder, checking Done before a write, would go on past the
// point where the store could give the key away.
func testDoneAtDeadline(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(4))
	a := c.newLocker()
	la := c.mustTryLock(ctx, a, c.key(), "TryLock on a free key must succeed")
	defer c.isolate(a)()
	for {
		deadline := la.Deadline()
		if wait := time.Until(deadline); wait > 0 {
			// A renewal sent before the cut may still move it on.
			if !sleep(ctx, wait) {
				c.Fatalf("%s: the isolated holder's Deadline kept moving: %v", doneAtDeadline, deadline)
			}
			continue
		}
		select {
		case <-la.Done():
		default:
			if la.Deadline().After(deadline) {
				continue // a renewal landed in between: its deadline counts
			}
			c.Fatalf("%s: Done of the lock on %s is still open %v after its Deadline", doneAtDeadline, short(la.Key()), time.Since(deadline))
		}
		if err := la.Err(); !errors.Is(err, locker.ErrLost) {
			c.Errorf("%s: Err = %v", doneAtDeadline, err)
		}
		break
	}

	// The ctx of Do's function, asked the moment another Locker got the
	// key, is already cancelled with ErrLost.
	d, b := c.newLocker(), c.newLocker()
	key := c.key()
	err := locker.Do(ctx, d, key, func(fctx context.Context) error {
		defer c.isolate(d)()
		lb, err := pollTryLock(ctx, b, key, c.every())
		if err != nil {
			return fmt.Errorf("an isolated holder's key must become free for others after its TTL: %w", err)
		}
		defer c.unlock(ctx, lb, heldUntil)
		if err := fctx.Err(); err == nil {
			c.Errorf("%s: the ctx of Do's function is still live when another Locker got the key", doneBeforeFree)
		} else if cause := context.Cause(fctx); !errors.Is(cause, locker.ErrLost) {
			c.Errorf("%s: the cause of Do's cancelled ctx = %v, want an error matching ErrLost", doneBeforeFree, cause)
		}
		return nil
	})
	if !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: Do whose lock was lost while its function ran: got %v, want an error matching ErrLost", doneBeforeFree, err)
	}
}
