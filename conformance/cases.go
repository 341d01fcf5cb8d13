package conformance

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golocker/locker"
)

// Contracts, quoted by the failure messages.
const (
	exclusive      = "a key must never be granted to two holders at once"
	heldUntil      = "a lock must stay held until it is unlocked"
	freeAfter      = "an unlocked key must be free for the next Locker at once"
	fencing        = "fencing tokens must be positive and strictly greater than every token handed out earlier for the key"
	ownership      = "Unlock must fail with ErrNotHeld for a lock that is no longer held, and never release another holder's lock"
	doneBeforeFree = "Done must close, and Err match ErrLost, before the store could give the key to anyone else"
	doneAtDeadline = "once a lock's Deadline has passed without a renewal, Done must be closed and Err match ErrLost when asked, however late the Locker's own timers run"
)

// lockResult carries a Lock call's outcome out of a goroutine.
type lockResult struct {
	lk  locker.Lock
	err error
}

// lockAsync calls l.Lock(ctx, key) in a goroutine and returns the channel
// that receives its outcome.
func lockAsync(ctx context.Context, l locker.Locker, key string) <-chan lockResult {
	res := make(chan lockResult, 1)
	go func() {
		lk, err := l.Lock(ctx, key)
		res <- lockResult{lk, err}
	}()
	return res
}

// soonTryLock takes key through l within d of from: for keys that must
// become free well within a TTL. The first attempt is made whatever the
// time, so that a slow machine does not fail the check before trying. A
// stall of the test process during the window (c.stalls) widens it by the
// stall: a process that did not run cannot have tried.
func (c *caseT) soonTryLock(ctx context.Context, l locker.Locker, key string, from time.Time, d time.Duration) (locker.Lock, error) {
	return c.soonTry(ctx, refused, func(ctx context.Context, opts ...locker.LockOption) (locker.Lock, error) {
		return l.TryLock(ctx, key, opts...)
	}, from, d)
}

// soonTry is soonTryLock for any one-shot acquisition, riding out the
// errors rides reports.
func (c *caseT) soonTry(ctx context.Context, rides func(error) bool, try func(context.Context, ...locker.LockOption) (locker.Lock, error), from time.Time, d time.Duration) (locker.Lock, error) {
	lk, err := try(ctx)
	if err == nil || !rides(err) {
		return lk, err
	}
	for {
		end := from.Add(d + c.stalls.Longest(from, time.Now()))
		pctx, cancel := context.WithDeadline(ctx, end)
		lk, err = pollWhile(pctx, c.every(), rides, func(ctx context.Context) (locker.Lock, error) { return try(ctx) })
		cancel()
		if err == nil || ctx.Err() != nil || !rides(err) {
			return lk, err
		}
		if !from.Add(d + c.stalls.Longest(from, time.Now())).After(end) {
			return nil, err
		}
	}
}

// stop ends a case that already reported its failure.
func (c *caseT) stop() {
	c.Helper()
	c.Fatalf("stopping the case after the failure above")
}

// parallel calls fn(0), …, fn(n-1) with at most workers calls at once.
func parallel(n, workers int, fn func(i int)) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}
