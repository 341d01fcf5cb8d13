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
	busyFor := c.h.TTL/4 + 500*time.Millisecond // past a fence of TTL/4
	ctx := c.ctx(busyFor + c.within(3))
	a := c.newLocker()

	// A key used once, so that a store that keeps a record per key has
	// one, free; and keys never used.
	used := c.key()
	c.unlock(ctx, c.mustTryLock(ctx, a, used, c.contract), c.contract)
	tries := []busyTryCall{
		{"TryLock of a key used before", func() (busyHold, error) { return oneHold(a.TryLock(ctx, used)) }},
		{"TryLock of a fresh key", func() (busyHold, error) { return oneHold(a.TryLock(ctx, c.key())) }},
		{"TryLockMulti of two fresh keys", func() (busyHold, error) { return multiHold(c.lockMulti(ctx, a, c.multiKeys(2), false)) }},
	}
	if s := c.sharedSemaphore(a, c.key(), 2, "the semaphore"); s != nil {
		tries = append(tries, busyTryCall{"TryAcquire of a free semaphore", func() (busyHold, error) { return oneHold(s.TryAcquire(ctx)) }})
	}
	for _, r := range c.besideBusy(ctx, a, busyFor, tries) {
		switch {
		case errors.Is(r.err, locker.ErrNotAcquired):
			c.Errorf("%s: %s answered that the key is held: %v", c.contract, r.what, r.err)
		case r.err != nil:
			c.Errorf("%s: %s: %v", c.contract, r.what, r.err)
		}
		// A grant counts its validity from the request's sending, before
		// its wait for a connection: what it took may be lost soon after,
		// which is no refusal.
	}
}

// busyResult is what a busyTryCall returned: what it took, or its error;
// lost is the hold's Err when the call returned, nil when it was held.
type busyResult struct {
	what string
	held busyHold
	err  error
	lost error
}

// besideBusy starts every call of tries while the caller's own slow work
// holds the client or pool a shares with the Locker (Harness.Busy), for
// busyFor, then ends that work, and returns what each call returned once
// it did. What they took is unlocked before besideBusy returns.
func (c *caseT) besideBusy(ctx context.Context, a locker.Locker, busyFor time.Duration, tries []busyTryCall) []busyResult {
	c.Helper()
	release := sync.OnceFunc(c.h.Busy(c.t, a))
	defer release()
	results := make(chan busyResult, len(tries))
	for _, tr := range tries {
		go func() {
			held, err := tr.try()
			r := busyResult{what: tr.what, held: held, err: err}
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
	out := make([]busyResult, 0, len(tries))
	for range tries {
		var r busyResult
		select {
		case r = <-results:
		case <-ctx.Done():
			c.Fatalf("%s: a call did not return %v after the caller's work ended", c.contract, c.within(3))
		}
		out = append(out, r)
		if r.err == nil {
			if err := r.held.Unlock(ctx); err != nil && !errors.Is(r.held.Err(), locker.ErrLost) {
				c.Errorf("%s: Unlock after %s: %v", c.contract, r.what, err)
			}
		}
	}
	return out
}

// oneHold returns a lock or permit and its error as a busyHold.
func oneHold(lk locker.Lock, err error) (busyHold, error) {
	if err != nil {
		return nil, err
	}
	return lk, nil
}

// multiHold returns a multi-key lock and its error as a busyHold.
func multiHold(m multiLock, err error) (busyHold, error) {
	if err != nil {
		return nil, err
	}
	return m, nil
}

// busyTryCall is a one-attempt call of testTryBesideBusyCaller: try
// returns what it took.
type busyTryCall struct {
	what string
	try  func() (busyHold, error)
}

// busyHold is what a busyTryCall took: a lock, a permit or a multi-key lock.
type busyHold interface {
	Done() <-chan struct{}
	Err() error
	Unlock(ctx context.Context) error
}
