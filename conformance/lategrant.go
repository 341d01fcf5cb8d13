package conformance

import (
	"context"
	"errors"
	"sync"

	"github.com/golocker/locker"
)

const lateGrant = "a lock, multi-key lock or permit that Lock, TryLock, TryLockMulti or TryAcquire returns must be held when it returns, also when its request waited for the caller's busy client or pool past the hold's validity: a grant that came back late is confirmed with the store, or refused, never handed over already lost"

// testLateGrant starts a TryLock, a Lock, a TryLockMulti of two keys and
// a semaphore's TryAcquire of free keys while the caller's own slow work holds the client or pool it
// shares with the Locker (Harness.Busy) for a TTL, then ends that work.
// Each request reaches the store after the validity its grant counts from
// the request's sending: a Locker that returns that grant as it is hands
// its caller a hold already lost, whose key the store may give to another
// holder while the caller's work runs. Each call must return a hold whose
// Done is still open, or an error.
func testLateGrant(c *caseT) {
	c.need("Busy", c.h.Busy != nil, "keep the caller's client or pool busy with its own slow work")
	busyFor := c.h.TTL // past the validity: the engine counts on 0.9 of it
	ctx := c.ctx(busyFor + c.within(3))
	a := c.newLocker()
	// taken is what a call took: a lock, a permit or a multi-key lock.
	type taken interface {
		Done() <-chan struct{}
		Err() error
		Unlock(ctx context.Context) error
	}
	type call struct {
		what string
		take func() (taken, error)
	}
	one := func(lk locker.Lock, err error) (taken, error) {
		if err != nil {
			return nil, err
		}
		return lk, nil
	}
	calls := []call{
		{"TryLock", func() (taken, error) { return one(a.TryLock(ctx, c.key())) }},
		{"Lock", func() (taken, error) { return one(a.Lock(ctx, c.key())) }},
		{"TryLockMulti of two keys", func() (taken, error) {
			m, err := c.lockMulti(ctx, a, c.multiKeys(2), false)
			if err != nil {
				return nil, err
			}
			return m, nil
		}},
	}
	if s := c.sharedSemaphore(a, c.key(), 2, "the semaphore"); s != nil {
		calls = append(calls, call{"TryAcquire", func() (taken, error) { return one(s.TryAcquire(ctx)) }})
	}
	type result struct {
		what string
		held taken
		err  error
		lost error // the hold's Err when the call returned, nil when it was held
	}
	release := sync.OnceFunc(c.h.Busy(c.t, a))
	defer release()
	results := make(chan result, len(calls))
	for _, cl := range calls {
		go func() {
			held, err := cl.take()
			r := result{what: cl.what, held: held, err: err}
			if err == nil {
				select {
				case <-held.Done():
					r.lost = held.Err()
				default:
				}
			}
			results <- r
		}()
	}
	if !sleep(ctx, busyFor) {
		c.Fatalf("%s: the case ran out of time: %v", c.contract, ctx.Err())
	}
	release()
	for range calls {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			c.Fatalf("%s: a call did not return %v after the caller's work ended", c.contract, c.within(3))
		}
		switch {
		case r.err != nil:
			// A refusal keeps the contract: Redlock bounds an attempt by
			// the validity, and a late grant may be refused.
			c.Logf("%s of a free key failed: %v", r.what, r.err)
		case r.lost != nil:
			c.Errorf("%s: %s returned a hold already lost: %v", c.contract, r.what, r.lost)
		}
		if r.err == nil {
			if err := r.held.Unlock(ctx); err != nil && !errors.Is(r.held.Err(), locker.ErrLost) {
				c.Errorf("%s: Unlock after %s: %v", c.contract, r.what, err)
			}
		}
	}
}
