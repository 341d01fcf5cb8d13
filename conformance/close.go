package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

// closeRacers is how many goroutines call TryLock while Close runs.
const closeRacers = 4

// raceResult is what tryUntilClosed returns: the error that ended its
// loop, and the locks it got before (which Close must end).
type raceResult struct {
	err  error
	held []locker.Lock
}

// tryUntilClosed calls TryLock on fresh keys (from key) until a call fails,
// and returns that failure and the locks it got. It tells running once its
// first call has succeeded and makes the second at once; the later ones
// come a millisecond apart, so that a slow Close does not pile up locks.
func tryUntilClosed(ctx context.Context, l locker.Locker, key func() string, running chan<- struct{}) raceResult {
	var r raceResult
	for {
		lk, err := l.TryLock(ctx, key())
		if err != nil {
			r.err = err
			return r
		}
		if len(r.held) == 0 {
			running <- struct{}{} // and the next call at once: Close comes now
		} else {
			time.Sleep(time.Millisecond)
		}
		r.held = append(r.held, lk)
	}
}

// releaseIf releases a lock granted by mistake.
func releaseIf(ctx context.Context, lk locker.Lock, err error) {
	if err == nil && lk != nil {
		_ = lk.Unlock(ctx)
	}
}

func testClose(c *caseT) {
	ctx := c.ctx(c.within(4))
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()

	keys := []string{c.key(), c.key(), c.key()}
	var locks []locker.Lock
	for _, k := range keys {
		locks = append(locks, c.mustTryLock(ctx, a, k, "TryLock on a free key must succeed"))
	}
	busy := c.key()
	lb := c.mustTryLock(ctx, b, busy, "TryLock on a free key must succeed")
	res := lockAsync(ctx, a, busy)
	select {
	case r := <-res:
		if r.err == nil {
			_ = r.lk.Unlock(ctx)
			c.Fatalf("%s: Lock returned a lock while another Locker held the key", exclusive)
		}
		c.Fatalf("Lock must wait while the key is held elsewhere, not fail: %v", r.err)
	case <-time.After(c.pause()):
	}

	// TryLocks racing Close: each either succeeds (and its Done closes with
	// the others') or fails with ErrClosed, never with a bare context
	// error from a call Close cut short.
	racers := make(chan raceResult, closeRacers)
	running := make(chan struct{}, closeRacers)
	for range closeRacers {
		go func() { racers <- tryUntilClosed(ctx, a, c.key, running) }()
	}
	for range closeRacers {
		select {
		case <-running:
		case r := <-racers:
			racers <- r // failed before Close: reported below
		}
	}
	if err := a.Close(); err != nil {
		c.Logf("Close returned %v", err)
	}
	const racing = "a TryLock racing Close must succeed or fail with an error matching ErrClosed"
	for range closeRacers {
		select {
		case r := <-racers:
			if !errors.Is(r.err, locker.ErrClosed) {
				c.Errorf("%s: got %v", racing, r.err)
			}
			locks = append(locks, r.held...)
		case <-time.After(c.within(1)):
			c.Errorf("%s: a TryLock was still running %v after Close returned", racing, c.within(1))
		}
	}
	const ends = "Close must end every wait in progress with an error matching ErrClosed"
	wctx, cancel := context.WithTimeout(ctx, c.within(1))
	defer cancel()
	select {
	case r := <-res:
		if r.err == nil {
			c.Errorf("%s: the waiting Lock returned a lock (the key was held by another Locker)", ends)
			_ = r.lk.Unlock(ctx)
		} else if !errors.Is(r.err, locker.ErrClosed) {
			c.Errorf("%s: got %v", ends, r.err)
		}
	case <-wctx.Done():
		c.Errorf("%s: the waiting Lock was still waiting %v after Close returned", ends, c.within(1))
	}
	const refuses = "after Close, Lock and TryLock must fail with an error matching ErrClosed"
	lk, err := a.Lock(ctx, c.key())
	if releaseIf(ctx, lk, err); !errors.Is(err, locker.ErrClosed) {
		c.Errorf("%s: Lock = %v", refuses, err)
	}
	lk, err = a.TryLock(ctx, c.key())
	if releaseIf(ctx, lk, err); !errors.Is(err, locker.ErrClosed) {
		c.Errorf("%s: TryLock = %v", refuses, err)
	}
	if _, ok := a.(locker.Inspector); ok {
		// Watch ends on this error: a Locker that still answers would
		// keep a watch of its keys going after Close.
		if _, err := locker.Inspect(ctx, a, keys[0]); !errors.Is(err, locker.ErrClosed) {
			c.Errorf("after Close, Inspect must fail with an error matching ErrClosed: got %v", err)
		}
	}
	const closes = "Close must close the Done channel of every lock it held, and their Err must match ErrLost"
	for _, lk := range locks {
		if c.doneClosed(lk, closes) && !errors.Is(lk.Err(), locker.ErrLost) {
			c.Errorf("%s: Err = %v", closes, lk.Err())
		}
		if err := lk.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
			c.Errorf("%s: Unlock of a lock its closed Locker held: got %v", ownership, err)
		}
	}
	// Close releases best-effort, so allow a short poll, well under what
	// waiting for expiry would take with a long TTL.
	const releases = "Close must release the locks it held (best effort) so that others get them without waiting for expiry"
	pctx, pcancel := context.WithTimeout(ctx, time.Second+c.h.TTL/4)
	defer pcancel()
	for _, k := range keys {
		lk, err := pollTryLock(pctx, other, k, c.every())
		if err != nil {
			c.Errorf("%s: TryLock(%s) from another Locker: %v", releases, short(k), err)
			continue
		}
		c.unlock(ctx, lk, heldUntil)
	}
	if err := a.Close(); err != nil {
		c.Errorf("a second Close must return nil: got %v", err)
	}
	c.held(lb, "closing one Locker must not disturb another's locks")
	c.unlock(ctx, lb, heldUntil)
}
