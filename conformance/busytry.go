package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/golocker/locker"
)

const busyTry = "a TryLock, a TryLockMulti and a semaphore's TryAcquire of free keys, sent while the caller's own slow work holds every connection of the client or pool it gave the Locker, must take the keys once that work ends, never answer that they are held"

// testTryBesideBusyCaller starts one-attempt calls on free keys while the
// caller's own slow work holds the client or pool it shares with the
// Locker (Harness.Busy), for longer than a quarter of the TTL, then ends
// that work: each call must take its keys. A store request that waited for
// a connection past its fence takes nothing; a Locker that then answers
// "held" refuses a free key (seen on PostgreSQL's multi-key statement and
// MySQL's inserts and UPDATEs under load).
func testTryBesideBusyCaller(c *caseT) {
	c.need("Busy", c.h.Busy != nil, "keep the caller's client or pool busy with its own slow work")
	contract := c.contract
	busyFor := c.h.TTL/4 + 500*time.Millisecond // past a fence of TTL/4
	ctx := c.ctx(busyFor + c.within(3))
	a := c.newLocker()

	// A key used once, so that a store that keeps a record per key has
	// one, free; and keys never used.
	used := c.key()
	c.unlock(ctx, c.mustTryLock(ctx, a, used, contract), contract)
	type result struct {
		what string
		held busyHold
		err  error
	}
	tries := []busyTryCall{
		{"TryLock of a key used before", func() (busyHold, error) {
			lk, err := a.TryLock(ctx, used)
			if err != nil {
				return nil, err
			}
			return lk, nil
		}},
		{"TryLock of a fresh key", func() (busyHold, error) {
			lk, err := a.TryLock(ctx, c.key())
			if err != nil {
				return nil, err
			}
			return lk, nil
		}},
		{"TryLockMulti of two fresh keys", func() (busyHold, error) {
			m, err := c.lockMulti(ctx, a, c.multiKeys(2), false)
			if err != nil {
				return nil, err
			}
			return m, nil
		}},
	}
	if s := c.sharedSemaphore(a, c.key(), 2, "the semaphore"); s != nil {
		tries = append(tries, busyTryCall{"TryAcquire of a free semaphore", func() (busyHold, error) {
			p, err := s.TryAcquire(ctx)
			if err != nil {
				return nil, err
			}
			return p, nil
		}})
	}

	release := sync.OnceFunc(c.h.Busy(c.t, a))
	defer release()
	results := make(chan result, len(tries))
	for _, tr := range tries {
		go func() {
			held, err := tr.try()
			results <- result{tr.what, held, err}
		}()
	}
	if !sleep(ctx, busyFor) {
		c.Fatalf("%s: the case ran out of time: %v", contract, ctx.Err())
	}
	release()
	for range tries {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			c.Fatalf("%s: a call did not return %v after the caller's work ended", contract, c.within(3))
		}
		switch {
		case errors.Is(r.err, locker.ErrNotAcquired):
			c.Errorf("%s: %s answered that the key is held: %v", contract, r.what, r.err)
		case r.err != nil:
			c.Errorf("%s: %s: %v", contract, r.what, r.err)
		default:
			// A grant counts its validity from the request's sending, before
			// its wait for a connection: what it took may be lost soon
			// after, which is no refusal.
			if err := r.held.Unlock(ctx); err != nil && !errors.Is(r.held.Err(), locker.ErrLost) {
				c.Errorf("%s: Unlock after %s: %v", contract, r.what, err)
			}
		}
	}
}

// busyTryCall is a one-attempt call of testTryBesideBusyCaller: try
// returns what it took.
type busyTryCall struct {
	what string
	try  func() (busyHold, error)
}

// busyHold is what a busyTryCall took: a lock, a permit or a multi-key lock.
type busyHold interface {
	Err() error
	Unlock(ctx context.Context) error
}
