package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

func testTryLock(c *caseT) {
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	if la.Key() != key {
		c.Errorf("Lock.Key must return the key as the caller gave it: got %s, want %s", short(la.Key()), short(key))
	}
	if la.Token() == 0 {
		c.Errorf("%s: Token() = 0", fencing)
	}
	c.held(la, heldUntil)
	c.refused(ctx, b, key, "TryLock from another Locker on a held key must fail with ErrNotAcquired")
	c.refused(ctx, a, key, "outside Do's ctx, TryLock on a key its own Locker holds must fail with ErrNotAcquired like any other contender")

	if err := la.Unlock(ctx); err != nil {
		c.Fatalf("Unlock of a held lock must succeed: %v", err)
	}
	c.doneClosed(la, "Done must be closed once Unlock returned")
	if err := la.Err(); err != nil {
		c.Errorf("Err must be nil after a successful Unlock: got %v", err)
	}
	lb, err := b.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("%s: TryLock from another Locker after Unlock: %v", freeAfter, err)
	}
	if lb.Token() <= la.Token() {
		c.Errorf("%s: the next holder got token %d after token %d", fencing, lb.Token(), la.Token())
	}
	c.unlock(ctx, lb, heldUntil)
}

func testMutualExclusion(c *caseT) {
	const lockers, goroutines, rounds = 4, 8, 16 // 512 acquisitions
	ctx := c.ctx(10*c.h.TTL + 12*c.slack)
	key := c.key()

	var (
		occupancy atomic.Int32
		overlaps  atomic.Int64
		acquired  atomic.Int64
		// counter is read, then written after a yield: increments by
		// overlapping holders get lost. It is an atomic only so that the
		// race detector stays quiet when a broken backend lets holders
		// overlap (and because a lock in another process is no
		// happens-before edge the race detector can see).
		counter   atomic.Int64
		lastToken atomic.Uint64
		errs      errList
		tokenErrs errList
		wg        sync.WaitGroup
	)
	for range lockers {
		l := c.newLocker()
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					lk, err := l.Lock(ctx, key)
					if err != nil {
						errs.add(fmt.Errorf("Lock: %w", err))
						return
					}
					if occupancy.Add(1) != 1 {
						overlaps.Add(1)
					}
					acquired.Add(1)
					v := counter.Load()
					runtime.Gosched()
					if (g+r)%4 == 0 {
						time.Sleep(50 * time.Microsecond)
					}
					counter.Store(v + 1)
					tok := lk.Token()
					if prev := lastToken.Load(); tok <= prev {
						tokenErrs.add(fmt.Errorf("token %d after token %d", tok, prev))
					}
					lastToken.Store(tok)
					if occupancy.Load() != 1 {
						overlaps.Add(1)
					}
					occupancy.Add(-1)
					if err := lk.Unlock(ctx); err != nil {
						errs.add(fmt.Errorf("Unlock: %w", err))
						return
					}
				}
			}()
		}
	}
	wg.Wait()

	errs.report(c, "Lock and Unlock of a contended key must succeed")
	if n := overlaps.Load(); n > 0 {
		c.Errorf("%s: holders overlapped %d times in %d acquisitions", exclusive, n, acquired.Load())
	}
	if got, want := counter.Load(), acquired.Load(); got != want {
		c.Errorf("%s: %d read-yield-write increments under the lock left the counter at %d: %d updates were lost to overlapping holders", exclusive, want, got, want-got)
	}
	tokenErrs.report(c, fencing+" (each successive holder, as seen under the lock)")
	if want := int64(lockers * goroutines * rounds); acquired.Load() != want {
		c.Errorf("every Lock must eventually get the key: %d of %d acquisitions happened", acquired.Load(), want)
	}
}

func testLockWaits(c *caseT) {
	ctx := c.ctx(c.within(8))
	key := c.key()
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()

	// A waiting Lock gets the key once its holder unlocks it.
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	res := lockAsync(ctx, b, key)
	select {
	case r := <-res:
		if r.err == nil {
			_ = r.lk.Unlock(ctx)
			c.Fatalf("%s: Lock from another Locker returned a lock while the key was held", exclusive)
		}
		c.Fatalf("Lock must wait while the key is held elsewhere, not fail: %v", r.err)
	case <-time.After(c.pause()):
	}
	c.unlock(ctx, la, heldUntil)
	r := <-res // b's Lock ends by itself at the case's deadline
	if r.err != nil {
		c.Fatalf("a waiting Lock must get the key once its holder unlocked it: %v", r.err)
	}
	if r.lk.Token() <= la.Token() {
		c.Errorf("%s: the waiter got token %d after token %d", fencing, r.lk.Token(), la.Token())
	}
	// A lock handed over to a waiter is renewed like any other.
	if !c.keepsHeld(ctx, c.h.TTL+c.h.TTL/2, other, []locker.Lock{r.lk}, heldUntil+" (a lock a waiting Lock got when its holder unlocked)") {
		return
	}
	c.unlock(ctx, r.lk, heldUntil)

	// The ctx given to Lock or TryLock bounds only the wait.
	key1, key2 := c.key(), c.key()
	lctx, cancel := context.WithCancel(ctx)
	l1, err := a.Lock(lctx, key1)
	cancel()
	if err != nil {
		c.Fatalf("Lock on a free key must succeed: %v", err)
	}
	tctx, tcancel := context.WithCancel(ctx)
	l2, err := a.TryLock(tctx, key2)
	tcancel()
	if err != nil {
		c.Fatalf("TryLock on a free key must succeed: %v", err)
	}
	const bounds = "the ctx given to Lock or TryLock bounds only the wait: cancelling it after the call returned must neither release nor lose the lock"
	if !c.keepsHeld(ctx, 2*c.h.TTL+c.h.TTL/2, other, []locker.Lock{l1, l2}, bounds) {
		return
	}
	c.unlock(ctx, l1, bounds)
	c.unlock(ctx, l2, bounds)
}

func testCancellation(c *caseT) {
	ctx := c.ctx(c.within(10))
	key := c.key()
	a := c.newLocker()
	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")

	const contract = "a Lock whose ctx ends while the key is held elsewhere must fail with an error matching ErrNotAcquired and ctx.Err()"
	check := func(r lockResult, want error) bool {
		c.Helper()
		switch {
		case r.err == nil:
			c.grantedWhileHeld(ctx, la, r.lk, "Lock", exclusive)
			return false
		case !errors.Is(r.err, locker.ErrNotAcquired) || !errors.Is(r.err, want):
			c.Errorf("%s: got %v, want an error matching ErrNotAcquired and %v", contract, r.err, want)
			return false
		}
		return true
	}

	// Deadlines, one after another on one Locker.
	b := c.newLocker()
	for i := range 50 {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(20+10*(i%4))*time.Millisecond)
		lk, err := b.Lock(wctx, key)
		cancel()
		if !check(lockResult{lk, err}, context.DeadlineExceeded) {
			break
		}
	}
	// A ctx already cancelled.
	dead, cancel := context.WithCancel(ctx)
	cancel()
	lk, err := b.Lock(dead, key)
	check(lockResult{lk, err}, context.Canceled)

	// Cancellations, concurrently, from several Lockers.
	const lockers, waits = 3, 10
	results := make(chan lockResult, lockers*waits)
	var wg sync.WaitGroup
	waiters := []locker.Locker{b}
	for range lockers {
		l := c.newLocker()
		waiters = append(waiters, l)
		for j := range waits {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				stop := time.AfterFunc(time.Duration(j)*3*time.Millisecond, cancel)
				defer stop.Stop()
				lk, err := l.Lock(wctx, key)
				results <- lockResult{lk, err}
			}()
		}
	}
	wg.Wait()
	close(results)
	for r := range results {
		if !check(r, context.Canceled) {
			break
		}
	}

	// Nothing may be left behind: once A unlocks, the key is free at once,
	// and stays free.
	c.unlock(ctx, la, heldUntil)
	const residue = "a Lock that failed because its ctx ended must leave no waiter behind: once the holder unlocked, the key must be free at once and stay free"
	fresh := c.newLocker()
	lk, err = fresh.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("%s: the first TryLock after Unlock failed: %v", residue, err)
	}
	c.unlock(ctx, lk, heldUntil)
	takers := append([]locker.Locker{fresh}, waiters...)
	window := max(2*c.h.TTL, time.Second)
	for i, start := 0, time.Now(); time.Since(start) < window; i++ {
		if !sleep(ctx, c.every()) {
			c.Fatalf("%s: the case ran out of time: %v", residue, ctx.Err())
		}
		lk, err := takers[i%len(takers)].TryLock(ctx, key)
		if err != nil {
			c.Fatalf("%s: TryLock %v after Unlock: %v", residue, time.Since(start).Round(time.Millisecond), err)
		}
		c.unlock(ctx, lk, heldUntil)
	}
}

func testOwnership(c *caseT) {
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	if err := la.Unlock(ctx); err != nil {
		c.Fatalf("Unlock of a held lock must succeed: %v", err)
	}
	if err := la.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: a second Unlock of the same lock: got %v", ownership, err)
	}

	lb := c.mustTryLock(ctx, b, key, freeAfter)
	if err := la.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: Unlock of a stale handle while another Locker holds the key: got %v", ownership, err)
	}
	c.held(lb, ownership+" (the current holder)")
	c.refused(ctx, other, key, ownership+" (the current holder must still hold the key)")

	// Two concurrent Unlocks of one lock: exactly one succeeds.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- lb.Unlock(ctx) }()
	}
	e1, e2 := <-errs, <-errs
	if (e1 == nil) == (e2 == nil) || !errors.Is(errors.Join(e1, e2), locker.ErrNotHeld) {
		c.Errorf("%s: two concurrent Unlocks of one lock must give one nil and one ErrNotHeld: got %v and %v", ownership, e1, e2)
	}
	lk := c.mustTryLock(ctx, other, key, freeAfter)
	c.unlock(ctx, lk, heldUntil)
}

func testOwnershipAfterCrash(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a holder")
	ctx := c.ctx(c.within(4))
	key := c.key()
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.h.Crash(c.t, a)
	lb, err := pollTryLock(ctx, b, key, c.every())
	if err != nil {
		c.Fatalf("a crashed holder's key must become free after its TTL: %v", err)
	}
	c.doneClosed(la, doneBeforeFree+" (the crashed holder's lock)")
	if err := la.Err(); !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: the crashed holder's Err = %v, want an error matching ErrLost", doneBeforeFree, err)
	}
	if err := la.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: the crashed holder's stale Unlock: got %v", ownership, err)
	}
	c.held(lb, ownership+" (the new holder)")
	c.refused(ctx, other, key, ownership+" (the new holder must still hold the key)")
	c.unlock(ctx, lb, heldUntil)
}

func testExpiry(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a holder")
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.h.Crash(c.t, a)
	lb, err := pollTryLock(ctx, b, key, c.every())
	if err != nil {
		c.Fatalf("a crashed holder's key must become free within its TTL (give or take clock slack): %v", err)
	}
	c.unlock(ctx, lb, heldUntil)
}

func testRenewal(c *caseT) {
	ctx := c.ctx(c.within(6))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	const contract = "a lock must be renewed automatically and stay held, for as long as it takes, until it is unlocked"
	if c.keepsHeld(ctx, 3*c.h.TTL+c.h.TTL/4, b, []locker.Lock{la}, contract) {
		c.unlock(ctx, la, contract)
	}
}

func testLossDeleteBehind(c *caseT) {
	c.need("DeleteBehind", c.h.DeleteBehind != nil, "delete a lock behind its holder's back")
	ctx := c.ctx(c.within(4))
	key := c.key()
	a := c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.h.DeleteBehind(c.t, key)
	const contract = "when a lock vanishes from the store, its holder must learn it: Done must close (by the next renewal at the latest) and Err match ErrLost"
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

func testFencing(c *caseT) {
	ctx := c.ctx(c.within(4))
	key := c.key()
	ls := []locker.Locker{c.newLocker(), c.newLocker(), c.newLocker(), c.newLocker()}
	var prev uint64
	for i := range 100 {
		lk, err := ls[i%len(ls)].TryLock(ctx, key)
		if err != nil {
			c.Fatalf("%s: TryLock of holder %d: %v", freeAfter, i, err)
		}
		if tok := lk.Token(); tok <= prev {
			c.Errorf("%s: holder %d got token %d after token %d", fencing, i, tok, prev)
		}
		prev = lk.Token()
		if err := lk.Unlock(ctx); err != nil {
			c.Fatalf("Unlock of a held lock must succeed: %v", err)
		}
	}
}

func testFencingAfterCrash(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a holder")
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.h.Crash(c.t, a)
	lb, err := pollTryLock(ctx, b, key, c.every())
	if err != nil {
		c.Fatalf("a crashed holder's key must become free after its TTL: %v", err)
	}
	if lb.Token() <= la.Token() {
		c.Errorf("%s: the holder after a crash got token %d after the crashed holder's %d", fencing, lb.Token(), la.Token())
	}
	c.unlock(ctx, lb, heldUntil)
}

func testFencingAfterRestart(c *caseT) {
	c.need("Restart", c.h.Restart != nil, "restart the store")
	ctx := c.ctx(c.within(6) + 2*c.slack)
	key := c.key()
	a := c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	c.unlock(ctx, la, heldUntil)
	c.h.Restart(c.t)
	// The store may come back without its locks, but never with lower
	// tokens. A fresh Locker stands for a replica started after the restart;
	// the old one must work again too.
	for i, l := range []locker.Locker{c.newLocker(), a} {
		lk, err := pollTryLockAny(ctx, l, key, c.every())
		if err != nil {
			c.Fatalf("after a store restart, the key must be acquirable again (Locker %d): %v", i, err)
		}
		if lk.Token() <= la.Token() {
			c.Errorf("%s: after a store restart the key got token %d after token %d", fencing, lk.Token(), la.Token())
		}
		c.unlock(ctx, lk, heldUntil)
		la = lk
	}
}

// soonTryLock takes key through l within d: for keys that must become free
// well within a TTL. The first attempt is made whatever the time, so that a
// slow machine does not fail the check before trying.
func soonTryLock(ctx context.Context, l locker.Locker, key string, d, every time.Duration) (locker.Lock, error) {
	lk, err := l.TryLock(ctx, key)
	if err == nil {
		return lk, nil
	}
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return pollTryLock(pctx, l, key, every)
}

// pollTryLockAny is pollTryLock that also retries store errors, for a store
// that is coming back.
func pollTryLockAny(ctx context.Context, l locker.Locker, key string, every time.Duration) (locker.Lock, error) {
	for {
		lk, err := l.TryLock(ctx, key)
		if err == nil {
			return lk, nil
		}
		if errors.Is(err, locker.ErrClosed) || errors.Is(err, locker.ErrInvalidKey) {
			return nil, err
		}
		if !sleep(ctx, every) {
			return nil, fmt.Errorf("still not acquired when the case's deadline passed: %w", err)
		}
	}
}

func testScale(c *caseT) {
	const n, sample, workers = 1000, 50, 16
	ctx := c.ctx(c.within(8) + 6*c.slack)
	base := c.key()
	a, b := c.newLocker(), c.newLocker()

	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%04d", base, i)
	}
	locks := make([]locker.Lock, n)
	var errs errList
	parallel(n, workers, func(i int) {
		lk, err := a.Lock(ctx, keys[i])
		if err != nil {
			errs.add(fmt.Errorf("Lock(%s): %w", short(keys[i]), err))
			return
		}
		locks[i] = lk
	})
	if !errs.report(c, fmt.Sprintf("one Locker must be able to hold %d keys at once", n)) {
		c.stop()
	}
	since := time.Now()
	sampled := func(yield func(int) bool) {
		for s := range sample {
			if !yield(s * n / sample) {
				return
			}
		}
	}
	const contract = "every lock of a Locker holding many keys must stay held, and be renewed, until unlocked"
	for i := range sampled {
		if !c.refusedWhileHeld(ctx, b, locks[i], contract) {
			c.stop()
		}
	}
	// Keep them all past two TTLs, checking every TTL/2.
	for time.Since(since) < 2*c.h.TTL+c.h.TTL/4 {
		if !sleep(ctx, c.h.TTL/2) {
			c.Fatalf("%s: the case ran out of time: %v", contract, ctx.Err())
		}
		for _, lk := range locks {
			if !c.held(lk, contract) {
				c.stop()
			}
		}
	}
	for i := range sampled {
		if !c.refusedWhileHeld(ctx, b, locks[i], contract+fmt.Sprintf(" (after %v)", time.Since(since).Round(time.Millisecond))) {
			c.stop()
		}
	}
	parallel(n, workers, func(i int) {
		if err := locks[i].Unlock(ctx); err != nil {
			errs.add(fmt.Errorf("Unlock(%s): %w", short(keys[i]), err))
		}
	})
	if !errs.report(c, "Unlock of each of many held locks must succeed") {
		c.stop()
	}
	for i := range sampled {
		lk, err := b.TryLock(ctx, keys[i])
		if err != nil {
			c.Fatalf("%s: TryLock(%s) from another Locker: %v", freeAfter, short(keys[i]), err)
		}
		c.unlock(ctx, lk, heldUntil)
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

func testReentrancy(c *caseT) {
	ctx := c.ctx(c.within(6))
	key := c.key()
	a, other := c.newLocker(), c.newLocker()
	// bound caps the calls that must return at once, so that a Locker that
	// makes them wait fails the case instead of hanging it.
	bound := c.h.TTL + c.slack/2
	const nested = "inside the ctx Do passes to its function, Lock, TryLock and Do on the same key through the same Locker must return a nested hold at once"
	const noRelease = "releasing a nested hold must not release the lock: only the outermost Do's release does"
	const contender = "outside Do's ctx, the same Locker must wait for a key it holds like any other contender"

	ran1, ran2 := false, false
	err := locker.Do(ctx, a, key, func(ctx1 context.Context) error {
		ran1 = true
		c.refused(ctx, other, key, "Do must hold the key while its function runs")

		lctx, cancel := context.WithTimeout(ctx1, bound)
		l1, err := a.Lock(lctx, key)
		cancel()
		if err != nil {
			c.Errorf("%s: Lock: %v", nested, err)
			return nil
		}
		if l1.Key() != key || l1.Token() == 0 {
			c.Errorf("%s: the nested hold has key %s and token %d", nested, short(l1.Key()), l1.Token())
		}

		dctx, dcancel := context.WithTimeout(ctx1, bound)
		defer dcancel()
		err = locker.Do(dctx, a, key, func(ctx2 context.Context) error {
			ran2 = true
			tctx, cancel := context.WithTimeout(ctx2, bound)
			defer cancel()
			l2, err := a.TryLock(tctx, key)
			if err != nil {
				c.Errorf("%s: TryLock, three deep: %v", nested, err)
				return nil
			}
			if l2.Token() != l1.Token() {
				c.Errorf("%s: a nested hold must carry the outer lock's token: got %d and %d", nested, l2.Token(), l1.Token())
			}
			if err := l2.Unlock(ctx); err != nil {
				c.Errorf("%s: the nested hold's Unlock: %v", noRelease, err)
			}
			c.refused(ctx, other, key, noRelease+" (after the innermost Unlock)")
			c.held(l1, noRelease)
			return nil
		})
		if err != nil {
			c.Errorf("%s: the nested Do returned %v, want its function's nil", nested, err)
		}
		if !ran2 {
			c.Errorf("%s: the nested Do did not run its function", nested)
		}
		c.refused(ctx, other, key, noRelease+" (after the nested Do returned)")
		if err := l1.Unlock(ctx); err != nil {
			c.Errorf("%s: the nested hold's Unlock: %v", noRelease, err)
		}
		c.refused(ctx, other, key, noRelease+" (after the nested Lock's Unlock)")

		// Without Do's ctx.
		wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		lk, err := a.Lock(wctx, key)
		wcancel()
		switch {
		case err == nil:
			c.Errorf("%s: Lock without Do's ctx returned a second hold", contender)
			_ = lk.Unlock(ctx)
		case !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded):
			c.Errorf("%s: Lock without Do's ctx: got %v, want an error matching ErrNotAcquired and context.DeadlineExceeded", contender, err)
		}
		c.refused(ctx, a, key, contender+" (TryLock without Do's ctx)")
		ranTry := false
		err = locker.TryDo(ctx, a, key, func(context.Context) error { ranTry = true; return nil })
		if !errors.Is(err, locker.ErrNotAcquired) || ranTry {
			c.Errorf("%s: TryDo without Do's ctx returned %v and ran its function: %v", contender, err, ranTry)
		}
		return nil
	})
	if err != nil {
		c.Errorf("Do must return its function's result (nil): got %v", err)
	}
	if !ran1 {
		c.Fatalf("Do must run its function on a free key")
	}
	lk, err := other.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("%s: after the outermost Do returned, TryLock from another Locker: %v", freeAfter, err)
	}
	c.unlock(ctx, lk, heldUntil)
}

func testKeys(c *caseT) {
	ctx := c.ctx(c.within(4))
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()
	const noPanic = "a Locker must never panic, whatever the key"
	// call runs f and turns a panic into a failure.
	call := func(what string, f func() error) (err error) {
		c.Helper()
		defer func() {
			if p := recover(); p != nil {
				c.Errorf("%s: %s panicked: %v", noPanic, what, p)
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return f()
	}
	tryLock := func(l locker.Locker, key string) (lk locker.Lock, err error) {
		err = call("TryLock("+short(key)+")", func() error {
			lk, err = l.TryLock(ctx, key)
			return err
		})
		return lk, err
	}

	// The empty key.
	const empty = "the empty key must be refused with an error matching ErrInvalidKey"
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	for what, f := range map[string]func() error{
		`Lock("")`:    func() error { lk, err := a.Lock(ctx, ""); releaseIf(ctx, lk, err); return err },
		`TryLock("")`: func() error { lk, err := a.TryLock(ctx, ""); releaseIf(ctx, lk, err); return err },
		`Do("")`:      func() error { return locker.Do(ctx, a, "", fn) },
		`TryDo("")`:   func() error { return locker.TryDo(ctx, a, "", fn) },
	} {
		if err := call(what, f); !errors.Is(err, locker.ErrInvalidKey) {
			c.Errorf("%s: %s = %v", empty, what, err)
		}
	}
	if ran {
		c.Errorf("%s: Do or TryDo ran its function", empty)
	}

	// Odd keys: each either works, as a key of its own, or is refused with
	// ErrInvalidKey. Prefixing them with base keeps them apart from other
	// cases and runs; base itself comes first, so that a backend that
	// confuses a key with its path parent is caught.
	base := c.key()
	long := base + "/"
	for len(long) < 4096 {
		long += "k"
	}
	cands := []string{
		base,
		base + "/a",
		base + "/a/b",
		base + "/a/",
		base + "/a//b",
		base + "/..",
		base + "/a/..",
		base + "/./a",
		base + "/",
		"/" + base,
		base + " with spaces ",
		base + "-ключ-鍵-🔒",
		base + "\x00nul",
		base + "\ttab\nnewline",
		base + "\xffnot-utf8",
		base + "*?[]{}%#'\"\\",
		long,
	}
	if m := c.h.MaxKeyBytes; m > 0 {
		exact := base + "-"
		for len(exact) < m {
			exact += "x"
		}
		exact = exact[:m]
		lk, err := tryLock(a, exact)
		if err != nil {
			c.Errorf("a key of exactly Harness.MaxKeyBytes (%d) bytes must work: %v", m, err)
		} else if err := lk.Unlock(ctx); err != nil {
			c.Errorf("a key of exactly Harness.MaxKeyBytes (%d) bytes must work: Unlock: %v", m, err)
		}
		for what, f := range map[string]func() error{
			"TryLock": func() error { lk, err := a.TryLock(ctx, exact+"x"); releaseIf(ctx, lk, err); return err },
			"Lock":    func() error { lk, err := a.Lock(ctx, exact+"x"); releaseIf(ctx, lk, err); return err },
		} {
			if err := call(what, f); !errors.Is(err, locker.ErrInvalidKey) {
				c.Errorf("a key one byte longer than Harness.MaxKeyBytes (%d) must be refused with ErrInvalidKey: %s = %v", m, what, err)
			}
		}
	}

	// Take every candidate, alternating between two Lockers, and hold them
	// all at once: keys that work must be distinct keys.
	type holding struct {
		key string
		lk  locker.Lock
	}
	var hs []holding
	for i, key := range cands {
		l := a
		if i%2 == 1 {
			l = b
		}
		lk, err := tryLock(l, key)
		if m := c.h.MaxKeyBytes; m > 0 && len(key) > m && !errors.Is(err, locker.ErrInvalidKey) {
			c.Errorf("a key longer than Harness.MaxKeyBytes (%d) must be refused with ErrInvalidKey: TryLock(%s) = %v", m, short(key), err)
			releaseIf(ctx, lk, err)
			continue
		}
		switch {
		case err == nil:
			hs = append(hs, holding{key, lk})
			if lk.Key() != key {
				c.Errorf("Lock.Key must return the key as the caller gave it: got %s, want %s", short(lk.Key()), short(key))
			}
		case errors.Is(err, locker.ErrInvalidKey):
			c.Logf("key %s refused as invalid: %v", short(key), err)
		case errors.Is(err, locker.ErrNotAcquired):
			held := make([]string, len(hs))
			for j, h := range hs {
				held[j] = short(h.key)
			}
			c.Errorf("distinct keys must never block each other: TryLock(%s) was refused while only these other keys were held: %v", short(key), held)
		default:
			c.Errorf("a key must either work or be refused with ErrInvalidKey: TryLock(%s) = %v", short(key), err)
		}
	}
	for _, h := range hs {
		c.refused(ctx, other, h.key, exclusive+", whatever its characters")
	}
	for _, h := range hs {
		if err := call("Unlock", func() error { return h.lk.Unlock(ctx) }); err != nil {
			c.Errorf("Unlock of the held lock on %s: %v", short(h.key), err)
		}
	}
	for _, h := range hs {
		lk, err := tryLock(other, h.key)
		if err != nil {
			c.Errorf("%s: TryLock(%s) from another Locker: %v", freeAfter, short(h.key), err)
			continue
		}
		c.unlock(ctx, lk, heldUntil)
	}
}

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

func testDo(c *caseT) {
	ctx := c.ctx(c.within(3))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	lb := c.mustTryLock(ctx, b, key, "TryLock on a free key must succeed")
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	if err := locker.TryDo(ctx, a, key, fn); !errors.Is(err, locker.ErrNotAcquired) {
		c.Errorf("TryDo on a key held elsewhere must return an error matching ErrNotAcquired: got %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := locker.Do(wctx, a, key, fn)
	cancel()
	if !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		c.Errorf("Do whose ctx ends while the key is held elsewhere must return an error matching ErrNotAcquired and ctx.Err(): got %v", err)
	}
	if ran {
		c.Errorf("TryDo and Do must not run their function when they did not get the key")
	}
	c.unlock(ctx, lb, heldUntil)
	// A Do whose wait ended must leave nothing behind that takes the key
	// later: give such a waiter time to act, then the key must be free.
	sleep(ctx, c.pause())
	c.unlock(ctx, c.mustTryLock(ctx, b, key, "a Do whose ctx ended while waiting must leave no waiter behind: after the holder released, the key must be free"), heldUntil)

	errFn := errors.New("conformance: the function's own error")
	ran = false
	err = locker.Do(ctx, a, key, func(fctx context.Context) error {
		ran = true
		c.refused(ctx, b, key, "Do must hold the key while its function runs")
		if err := fctx.Err(); err != nil {
			c.Errorf("the ctx Do passes to its function must not be done while the lock is held: %v", err)
		}
		return errFn
	})
	if !ran {
		c.Fatalf("Do must run its function on a free key: %v", err)
	}
	if !errors.Is(err, errFn) {
		c.Errorf("Do must return its function's error: got %v", err)
	}
	lk, err := b.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("Do must release the key when its function returned: TryLock from another Locker: %v", err)
	}
	c.unlock(ctx, lk, heldUntil)

	ran = false
	err = locker.TryDo(ctx, a, key, func(fctx context.Context) error {
		ran = true
		c.refused(ctx, b, key, "TryDo must hold the key while its function runs")
		return nil
	})
	if err != nil || !ran {
		c.Errorf("TryDo on a free key must run its function and return its result (nil): got %v, ran %v", err, ran)
	}
	lk, err = b.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("TryDo must release the key when its function returned: TryLock from another Locker: %v", err)
	}
	c.unlock(ctx, lk, heldUntil)
}
