package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/golocker/locker"
)

// The case of this file checks that calls end with their ctx while the
// store does not answer at all: a store that stalls, not one that refuses.

// Contracts, quoted by the failure messages.
const (
	promptCancel = "a Lock, TryLock or Unlock whose ctx ends must return promptly even while its Locker is cut off from the store (the first calls of a fresh Locker included)"
	promptResult = "a Lock whose ctx ends while its Locker is cut off from the store must fail with an error matching ErrNotAcquired and ctx.Err()"
)

// Calls of the PromptCancel case, and the span of their deadlines.
const (
	promptLocks    = 50
	promptTryLocks = 10
	promptSpan     = 500 * time.Millisecond
)

// promptLate is how long after its ctx ended a call may return in
// PromptCancel: far above what a quiet machine needs, below a call that
// waits for a timeout of its own.
func (c *caseT) promptLate() time.Duration { return max(time.Second, c.h.TTL/2) }

// timedCall is one call of PromptCancel and how it ended.
type timedCall struct {
	op       string // "Lock", "TryLock" or "Unlock"
	what     string
	deadline time.Time
	late     time.Duration // return time minus deadline; negative when early
	err      error
	ctxErr   error // the call's ctx's Err when it returned
}

func testPromptCancel(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(8))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()
	// w has talked to the store; f and g never have: their first calls
	// are made while they are cut off.
	w, f, g := c.newLocker(), c.newLocker(), c.newLocker()
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	lw := c.mustTryLock(ctx, w, c.key(), "TryLock on a free key must succeed")

	heals := []func(){c.isolate(w), c.isolate(f), c.isolate(g)}
	start := time.Now()
	deadline := func(i, n int) time.Time {
		return start.Add(time.Millisecond + time.Duration(i)*(promptSpan-time.Millisecond)/time.Duration(n-1))
	}
	var (
		mu    sync.Mutex
		calls []timedCall
		wg    sync.WaitGroup
	)
	run := func(op, what string, dl time.Time, call func(ctx context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithDeadline(ctx, dl)
			defer cancel()
			err := call(cctx)
			tc := timedCall{op: op, what: op + " " + what, deadline: dl, late: time.Since(dl), err: err, ctxErr: cctx.Err()}
			mu.Lock()
			calls = append(calls, tc)
			mu.Unlock()
		}()
	}
	grantedLocks := make(chan locker.Lock, promptLocks+promptTryLocks)
	lockCall := func(l locker.Locker, k string, try bool) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			acquire := l.Lock
			if try {
				acquire = l.TryLock
			}
			lk, err := acquire(ctx, k)
			if err == nil {
				grantedLocks <- lk
			}
			return err
		}
	}
	// Lock calls: the even ones (the earliest deadline first) on the fresh
	// f, the odd ones on w; every third on the held key, the others on
	// keys of their own.
	for i := range promptLocks {
		l, name := w, "w"
		if i%2 == 0 {
			l, name = f, "fresh f"
		}
		k, held := c.key(), ""
		if i%3 == 0 {
			k, held = key, " (held)"
		}
		run("Lock", fmt.Sprintf("#%d on %s%s", i, name, held), deadline(i, promptLocks), lockCall(l, k, false))
	}
	// TryLock calls: the even ones on the fresh g, the odd ones on w.
	for i := range promptTryLocks {
		l, name := w, "w"
		if i%2 == 0 {
			l, name = g, "fresh g"
		}
		run("TryLock", fmt.Sprintf("#%d on %s", i, name), deadline(i, promptTryLocks), lockCall(l, c.key(), true))
	}
	run("Unlock", "on w", deadline(1, 2), lw.Unlock)

	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		c.Fatalf("%s: calls still running when the case ended", promptCancel)
	}
	close(grantedLocks)
	for lk := range grantedLocks {
		c.Errorf("%s: a call got the key %s while cut off from the store", promptCancel, short(lk.Key()))
		if lk.Key() == key {
			c.grantedWhileHeld(ctx, la, lk, "Lock", exclusive)
		}
	}

	// A stall of the test process while the calls ran delays their
	// returns as it delays everything: it widens the bound.
	stalled := c.stalls.Longest(start, time.Now())
	bound := c.promptLate() + stalled
	var lates []time.Duration
	for _, tc := range calls {
		lates = append(lates, tc.late)
		switch {
		case tc.late > bound:
			c.Errorf("%s: %s returned %v after its ctx ended (allowed: %v): %v", promptCancel, tc.what, tc.late.Round(time.Millisecond), bound, tc.err)
		case tc.op != "Lock" || tc.err == nil:
			// An Unlock's outcome is UnlockWhileIsolated's business, and
			// a TryLock may give up before its ctx ends; a grant was
			// reported above.
		case tc.ctxErr == nil:
			c.Errorf("%s: %s returned %v before its ctx ended", promptResult, tc.what, tc.err)
		case !errors.Is(tc.err, locker.ErrNotAcquired) || !errors.Is(tc.err, tc.ctxErr):
			c.Errorf("%s: %s: got %v, want an error matching ErrNotAcquired and %v", promptResult, tc.what, tc.err, tc.ctxErr)
		}
	}
	slices.Sort(lates)
	q := func(p int) time.Duration { return lates[(len(lates)-1)*p/100].Round(100 * time.Microsecond) }
	c.Logf("lateness after the ctx's end of %d calls cut off from the store: min %v, median %v, p90 %v, max %v (allowed %v, the process stalled for up to %v)",
		len(lates), lates[0].Round(100*time.Microsecond), q(50), q(90), q(100), bound, stalled.Round(time.Millisecond))

	// The cut ends; whatever the calls left behind must not hold up the
	// key once its holder unlocks it.
	for _, heal := range heals {
		heal()
	}
	c.unlock(ctx, la, heldUntil)
	freed := time.Now()
	lb, err := c.soonTryLock(ctx, b, key, freed, c.promptLate())
	if err != nil {
		c.Fatalf("%s: TryLock %v after Unlock: %v", noResidue, time.Since(freed).Round(time.Millisecond), err)
	}
	c.Logf("the key was free for another Locker %v after the holder's Unlock", time.Since(freed).Round(time.Millisecond))
	c.unlock(ctx, lb, heldUntil)
}
