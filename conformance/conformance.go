package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/stall"
)

// defaultSlack is added to every TTL-based deadline of Run: time for a busy
// machine, a store behind a network, and the race detector.
const defaultSlack = 5 * time.Second

// Run runs every case against the backend h describes, each as a subtest.
// Cases that need a nil hook skip and say which. Cases run in parallel with
// each other (t.Parallel), except FencingAfterRestart and
// LockRidesOutRestart, which run alone.
//
// A case that fails while the test process stalls runs again, up to three
// attempts in all. A stall is a timer of Run's firing more than a
// twentieth of h.TTL late. Such a machine may starve the Lockers'
// renewals, and a lock lost so says nothing of the Locker. So does a
// failure that reports a lock lost at its local deadline whose error
// wraps nothing but locker.ErrLost, locker.ErrNoRenewal and timeouts: a
// store too slow to answer renewals, as on a loaded machine. A loss whose
// last renewal the store answered with an error is no such loss. Any
// other failure fails the test at once. Only the last attempt's failures
// fail the test; the earlier attempts' reports are logged. A case reports
// when its attempt ends, not as it runs.
//
// An attempt that runs on well past its last deadline (the deadlines it
// gives its calls, plus two TTLs and twice the slack, plus any stall of
// the process meanwhile) fails as hung, naming the case and the call that
// did not return: a Locker call that ignores its ctx fails its case, and
// does not hang the test binary. Its goroutine is left to the call.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewLocker == nil {
		t.Fatal("conformance: Harness.NewLocker is nil")
	}
	if h.TTL <= 0 {
		t.Fatalf("conformance: Harness.TTL is %v; set it to the TTL the harness's Lockers use", h.TTL)
	}
	// The parallel cases run after Run returns: the watch stops when the
	// last one has ended.
	stalls := stall.ForTTL(h.TTL)
	t.Cleanup(stalls.Stop)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.serial {
				t.Parallel()
			}
			runCase(t, h, tc, stalls)
		})
	}
}

// Cases returns the names of the cases, in the order Run runs them: each is
// the name of a subtest of the test that called Run. The caller may modify
// the returned slice.
func Cases() []string {
	names := make([]string, len(cases))
	for i, tc := range cases {
		names[i] = tc.name
	}
	return names
}

// testCase is one case of the suite.
type testCase struct {
	name string
	// contract is what the case checks, in one or two sentences: its
	// failure messages quote it.
	contract string
	// serial cases disturb the whole store (Restart) and must not overlap
	// other cases.
	serial bool
	run    func(c *caseT)
}

// cases is every case, in the order Run runs them.
var cases = []testCase{
	{name: "TryLock", contract: "TryLock must grant a free key, refuse a held one to every other caller with an error matching ErrNotAcquired, and grant it again once it is unlocked", run: testTryLock},
	{name: "MutualExclusion", contract: exclusive, run: testMutualExclusion},
	{name: "LockWaits", contract: "Lock must wait while the key is held elsewhere and get it once the holder unlocks it; its ctx bounds only the wait", run: testLockWaits},
	{name: "Cancellation", contract: "a Lock whose ctx ends while the key is held elsewhere must fail with an error matching ErrNotAcquired and ctx.Err()", run: testCancellation},
	{name: "Ownership", contract: ownership, run: testOwnership},
	{name: "OwnershipAfterCrash", contract: ownership, run: testOwnershipAfterCrash},
	{name: "Expiry", contract: "a crashed holder's key must become free within its TTL (give or take clock slack)", run: testExpiry},
	{name: "Renewal", contract: "a lock must be renewed automatically and stay held, for as long as it takes, until it is unlocked", run: testRenewal},
	{name: "LossDeleteBehind", contract: "when a lock vanishes from the store, its holder must learn it: Done must close (by the next renewal at the latest) and Err match ErrLost", run: testLossDeleteBehind},
	{name: "LossIsolate", contract: doneBeforeFree, run: testLossIsolate},
	{name: "DoneAtDeadline", contract: doneAtDeadline, run: testDoneAtDeadline},
	{name: "Fencing", contract: fencing, run: testFencing},
	{name: "FencingAfterCrash", contract: fencing, run: testFencingAfterCrash},
	{name: "FencingAfterRestart", serial: true, contract: fencing, run: testFencingAfterRestart},
	{name: "Scale", contract: "every lock of a Locker holding many keys must stay held, and be renewed, until unlocked", run: testScale},
	{name: "Reentrancy", contract: "inside Do's ctx, the same Locker must hand out nested holds of the key, whose release does not release it; outside it, the Locker waits like any other contender", run: testReentrancy},
	{name: "Keys", contract: "a key must either work as a distinct, exclusive key or be refused with an error matching ErrInvalidKey; the empty key is refused, and nothing panics", run: testKeys},
	{name: "Close", contract: "Close must end waits and refuse further calls with errors matching ErrClosed, close every held lock's Done, and release their keys", run: testClose},
	{name: "Do", contract: "Do and TryDo must run their function only while they hold the key, return its error, and release the key once it returns", run: testDo},
	{name: "StaleDoContext", contract: staleCtx, run: testStaleDoContext},
	{name: "CloseWhileIsolated", contract: closeIsolate, run: testCloseWhileIsolated},
	{name: "UnlockRacingRenewal", contract: noFalseLoss, run: testUnlockRacingRenewal},
	{name: "UnlockEndedContext", contract: endedUnlock, run: testUnlockEndedContext},
	{name: "NilContext", contract: nilCtx, run: testNilContext},
	{name: "BadPrefix", contract: badPrefix, run: testBadPrefix},
	{name: "CancelWhileIsolated", contract: noResidue, run: testCancelWhileIsolated},
	{name: "LockRidesOutRestart", serial: true, contract: ridesOut, run: testLockRidesOutRestart},
	{name: "WaiterCrash", contract: deadWaiterEnd, run: testWaiterCrash},
	{name: "UnlockWhileIsolated", contract: laterRelease, run: testUnlockWhileIsolated},
	{name: "MinHold", contract: "a lock taken with MinHold(m) keeps its key claimed until m after the acquisition, after an early Unlock as after a crash", run: testMinHold},
	{name: "MaxHold", contract: "a lock taken with MaxHold(d) ends d after its acquisition, however long its holder runs", run: testMaxHold},
	{name: "LockTTL", contract: "a lock taken with TTL(t) is kept by the store for t without renewal", run: testLockTTL},
	{name: "Inspect", contract: "Inspect tells who holds a key, as the store says", run: testInspect},
	{name: "ForceUnlock", contract: "ForceUnlock frees a key whoever holds it: the holder's Done closes, and others get the key", run: testForceUnlock},
	{name: "Elect", contract: "with locker.Elect one replica leads at a time, and another takes over after the leader crashes", run: testElect},
	{name: "HandOff", contract: handedOver + "; " + triedOnly, run: testHandOff},
	{name: "Failover", serial: true, contract: survives, run: testFailover},
	{name: "DoPanic", contract: "a panic in the function of Do or TryDo must release the key and reach the caller with its own value", run: testDoPanic},
	{name: "CheckOptions", contract: "CheckLockOptions must refuse exactly the LockOptions that Lock and TryLock refuse", run: testCheckOptions},
	{name: "LateDelivery", contract: noLateHolder, run: testLateDelivery},
	{name: "PromptCancel", contract: promptCancel, run: testPromptCancel},
	{name: "MultiNoDeadlock", contract: multiNoCycle, run: testMultiNoDeadlock},
	{name: "MultiAllOrNothing", contract: multiAllOrNone, run: testMultiAllOrNothing},
	{name: "MultiCrash", contract: multiCrash, run: testMultiCrash},
	{name: "MultiLoss", contract: multiLoss, run: testMultiLoss},
	{name: "MultiCancel", contract: multiResidue, run: testMultiCancel},
	{name: "Watch", contract: watchBound, run: testWatch},
	{name: "Extend", contract: extended, run: testExtend},
	{name: "List", contract: "List must yield every key held under the prefix once, with its holder's token, and no free key", run: testList},
	{name: "SemaphoreLimit", contract: withinLimit, run: testSemaphoreLimit},
	{name: "SemaphoreCrash", contract: "a crashed holder's permit must come back within its TTL", run: testSemaphoreCrash},
	{name: "RWExclusion", contract: readersShare, run: testRWExclusion},
	{name: "RWWriterFirst", contract: writerNotLast, run: testRWWriterFirst},
	{name: "SharedFencing", contract: sharedFencing, run: testSharedFencing},
	{name: "SharedCancellation", contract: sharedNoResidu, run: testSharedCancellation},
	{name: "SharedLossIsolate", contract: doneBeforeFree, run: testSharedLossIsolate},
	{name: "SharedLateDelivery", contract: noLatePermit, run: testSharedLateDelivery},
	{name: "SemaphoreSetLimit", contract: limitChanged, run: testSemaphoreSetLimit},
	{name: "ForceUnlockShared", contract: "ForceUnlock frees every holder of a shared key, however many: each holder's Done closes, and the permits can be taken again", run: testForceUnlockShared},
	{name: "MultiTryAtomic", contract: multiAtomic, run: testMultiTryAtomic},
	{name: "Data", contract: carriesData, run: testData},
	{name: "LossAfterRenewal", contract: "when a lock or permit vanishes from the store after it was renewed, or after another hold of its key by the same Locker was, its holder must learn it: Done must close and Err match ErrLost", run: testLossAfterRenewal},
	{name: "MultiUnlock", contract: multiUnlockFrees, run: testMultiUnlock},
	{name: "SetLimitWaiters", contract: limitWaitsGone, run: testSetLimitWaiters},
	{name: "SetLimitForgotten", contract: limitForgotten, run: testSetLimitForgotten},
	{name: "SharedKeyFreed", contract: sharedFreed, run: testSharedKeyFreed},
	{name: "FirstHolder", contract: firstHolders, run: testFirstHolder},
	{name: "CloseWhileWaiting", contract: closeWaiting + "; " + closedWaits, run: testCloseWhileWaiting},
	{name: "CloseEndsBackgroundCalls", contract: closeBackground, run: testCloseEndsBackgroundCalls},
	{name: "SemaphorePool", contract: withinLimit, run: testSemaphorePool},
	{name: "PromptCancelCalls", contract: promptCalls, run: testPromptCancelCalls},
	{name: "MaxHoldBesideHeld", contract: maxHoldBeside, run: testMaxHoldBesideHeld},
	{name: "UnlockPastDeadline", contract: pastDeadline, run: testUnlockPastDeadline},
	{name: "ExtendWhileRenewed", contract: extendedHeld, run: testExtendWhileRenewed},
	{name: "RefusedStraggler", contract: noStraggler, run: testRefusedStraggler},
	{name: "RenewalBesideBusyCaller", contract: busyCaller, run: testRenewalBesideBusyCaller},
	{name: "TryBesideBusyCaller", contract: busyTry, run: testTryBesideBusyCaller},
	{name: "LateGrant", contract: lateGrant, run: testLateGrant},
}

// reporter is the part of *testing.T a case reports through: a recorder
// of one attempt (runCase), which Run replays to the *testing.T when the
// attempt counts. The suite's own test reads the recorder, so that it can
// run a case against a broken Locker and check that the case fails without
// failing itself. Fatalf and Skipf must not return (they end the goroutine).
type reporter interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// caseT is what a case runs with. Failures go through the embedded reporter
// only; t provides the context, cleanups and the testing.TB given to hooks.
type caseT struct {
	reporter
	t        *caseTB // the case's test, safe to call after it completed
	h        Harness
	name     string        // source of the case's keys
	contract string        // the case's contract (testCase)
	slack    time.Duration // added to TTL-based deadlines
	budget   *budget       // the attempt's budget (watchCase); nil when nothing watches it
	stalls   *stall.Watch  // the process's stalls; nil when none are measured
}

// ctx returns a context that ends after d (or when the test ends).
func (c *caseT) ctx(d time.Duration) context.Context {
	ctx, cancel := c.ctxCancel(d)
	c.t.Cleanup(cancel)
	return ctx
}

// ctxCancel returns a context that ends after d (or when the test ends, or
// cancel is called), and extends the attempt's budget (watchCase) to its
// deadline.
func (c *caseT) ctxCancel(d time.Duration) (ctx context.Context, cancel context.CancelFunc) {
	if c.budget != nil {
		c.budget.extend(time.Now().Add(d))
	}
	return context.WithTimeout(c.t.Context(), d)
}

// within is n TTLs plus the slack: the deadline for something that the
// contract says happens within n TTLs.
func (c *caseT) within(n int) time.Duration { return time.Duration(n)*c.h.TTL + c.slack }

// perCall is what a case's budget allows for each store call it makes in
// sequence. Such a budget only bounds a hang, so it is generous: a store
// of several servers on a loaded machine is slow per call (docs/design.md,
// "Tests on a loaded machine").
const perCall = 500 * time.Millisecond

// forCalls is the budget of a case that makes calls store calls one after
// another and waits for nothing longer than a TTL: within(1) plus perCall
// for each call.
func (c *caseT) forCalls(calls int) time.Duration {
	return c.within(1) + time.Duration(calls)*perCall
}

// every is the polling interval of the cases that poll.
func (c *caseT) every() time.Duration {
	return clamp(c.h.TTL/20, 5*time.Millisecond, 100*time.Millisecond)
}

// pause is how long a case gives a goroutine to start waiting in Lock before
// it acts. Nothing is measured: a slower start only makes the check weaker.
func (c *caseT) pause() time.Duration {
	return clamp(c.h.TTL/4, 20*time.Millisecond, 250*time.Millisecond)
}

func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

// need skips the case when a hook it needs is missing.
func (c *caseT) need(hook string, present bool, why string) {
	c.Helper()
	if !present {
		c.Skipf("Harness.%s is nil: the harness cannot %s", hook, why)
	}
}

// key returns a fresh key for this case: its name, sanitized, plus a random
// suffix, so that parallel cases, reruns and other test binaries on the same
// store never share keys.
func (c *caseT) key() string {
	limit := 48
	if m := c.h.MaxKeyBytes; m > 0 {
		// Leave room for the suffix and for the few bytes some cases append.
		limit = min(limit, m-13-8)
	}
	return keyFrom(c.name, limit)
}

// keyFrom builds a key from a test name: letters, digits, '-', '_' and '.'
// are kept, anything else becomes '_'; at most limit bytes of the name (its
// end, where the case name is) are kept, then "-" and 12 random hex digits.
func keyFrom(name string, limit int) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if limit < 0 {
		limit = 0
	}
	if len(s) > limit {
		s = s[len(s)-limit:]
	}
	return fmt.Sprintf("%s-%012x", s, rand.Uint64()&(1<<48-1))
}

// isolate cuts l off from the store with the Isolate hook and returns the
// heal, which runs once: when called, or when the test ends.
func (c *caseT) isolate(l locker.Locker) (heal func()) {
	h := c.h.Isolate(c.t, l)
	var once sync.Once
	heal = func() {
		if h != nil {
			once.Do(h)
		}
	}
	c.t.Cleanup(heal)
	return heal
}

// newLocker returns a fresh Locker from the harness and closes it when the
// test ends.
func (c *caseT) newLocker() locker.Locker {
	c.Helper()
	l := c.h.NewLocker(c.t)
	if l == nil {
		c.Fatalf("Harness.NewLocker returned nil")
	}
	c.t.Cleanup(func() {
		// A crashed or isolated Locker may fail to release on Close; the
		// Close case checks Close itself.
		if err := l.Close(); err != nil {
			c.t.Logf("closing a Locker at the end of the case: %v", err)
		}
	})
	return l
}

// labelled returns a fresh Locker whose owner label is label, closed when
// the test ends; without Harness.NewLockerWith, a plain Locker and "".
func (c *caseT) labelled(label string) (locker.Locker, string) {
	c.Helper()
	if c.h.NewLockerWith == nil {
		return c.newLocker(), ""
	}
	l, err := c.h.NewLockerWith(c.t, locker.WithOwnerLabel(label))
	if err != nil {
		c.Fatalf("NewLockerWith(WithOwnerLabel): %v", err)
	}
	c.t.Cleanup(func() { _ = l.Close() })
	return l, label
}

// mustTryLock takes a key that the case knows to be free.
func (c *caseT) mustTryLock(ctx context.Context, l locker.Locker, key, contract string) locker.Lock {
	c.Helper()
	lk, err := l.TryLock(ctx, key)
	if err != nil {
		c.Fatalf("%s: TryLock(%s) on a free key: %v", contract, short(key), err)
	}
	return lk
}

// refused checks that other cannot take key now: TryLock must fail with an
// error matching ErrNotAcquired. A lock granted by mistake is released.
func (c *caseT) refused(ctx context.Context, other locker.Locker, key, contract string) bool {
	c.Helper()
	lk, err := other.TryLock(ctx, key)
	if err == nil {
		c.Errorf("%s: TryLock(%s) from another Locker succeeded (token %d) while the key was held", contract, short(key), lk.Token())
		_ = lk.Unlock(context.WithoutCancel(ctx))
		return false
	}
	return c.refusedErr(key, err, contract)
}

// refusedWhileHeld is refused for a key whose holder's lock is lk: when
// the other Locker gets the key, the error tells a holder that had already
// lost its lock (its Done closed: it could not keep the key) from two
// holders at once (its Done still open).
func (c *caseT) refusedWhileHeld(ctx context.Context, other locker.Locker, lk locker.Lock, contract string) bool {
	c.Helper()
	got, err := other.TryLock(ctx, lk.Key())
	if err != nil {
		return c.refusedErr(lk.Key(), err, contract)
	}
	c.grantedWhileHeld(ctx, lk, got, "TryLock", contract)
	return false
}

// grantedWhileHeld reports a lock got by another Locker's call (TryLock,
// Lock) on the key of holder, and releases it: either the holder had
// already lost its lock (its Done closed: it could not keep the key, say
// the renewals starved) or two held the key at once (its Done open).
func (c *caseT) grantedWhileHeld(ctx context.Context, holder, got locker.Lock, call, contract string) {
	c.Helper()
	defer func() { _ = got.Unlock(context.WithoutCancel(ctx)) }()
	select {
	case <-holder.Done():
		c.Errorf("%s: the holder lost its lock on %s (Err: %v), then another Locker's %s got the key (token %d): the holder could not keep it", contract, short(holder.Key()), holder.Err(), call, got.Token())
	default:
		c.Errorf("%s: another Locker's %s got the key %s (token %d) while the holder's Done was open: two holders at once", contract, call, short(holder.Key()), got.Token())
	}
}

// refusedErr checks the error of a TryLock that must be refused.
func (c *caseT) refusedErr(key string, err error, contract string) bool {
	c.Helper()
	if !errors.Is(err, locker.ErrNotAcquired) {
		c.Errorf("%s: TryLock(%s) from another Locker: got %v, want an error matching ErrNotAcquired", contract, short(key), err)
		return false
	}
	return true
}

// held checks that lk is still held as far as its holder can tell: Done open
// and Err nil.
func (c *caseT) held(lk locker.Lock, contract string) bool {
	c.Helper()
	select {
	case <-lk.Done():
		c.Errorf("%s: Done of the lock on %s is closed (Err: %v), want it open while the lock is held", contract, short(lk.Key()), lk.Err())
		return false
	default:
	}
	if err := lk.Err(); err != nil {
		c.Errorf("%s: Err of the lock on %s = %v, want nil while the lock is held", contract, short(lk.Key()), err)
		return false
	}
	return true
}

// doneClosed checks that lk's Done is closed.
func (c *caseT) doneClosed(lk locker.Lock, contract string) bool {
	c.Helper()
	select {
	case <-lk.Done():
		return true
	default:
		c.Errorf("%s: Done of the lock on %s is still open", contract, short(lk.Key()))
		return false
	}
}

// unlock releases lk and requires success.
func (c *caseT) unlock(ctx context.Context, lk locker.Lock, contract string) {
	c.Helper()
	if err := lk.Unlock(ctx); err != nil {
		c.Errorf("%s: Unlock of the held lock on %s: %v", contract, short(lk.Key()), err)
	}
}

// keepsHeld checks, every TTL/4 for at least d, that every lock in locks is
// still held and refused to other.
func (c *caseT) keepsHeld(ctx context.Context, d time.Duration, other locker.Locker, locks []locker.Lock, contract string) bool {
	c.Helper()
	start := time.Now()
	for {
		for _, lk := range locks {
			if !c.held(lk, contract) || !c.refusedWhileHeld(ctx, other, lk, contract) {
				return false
			}
		}
		if time.Since(start) >= d {
			return true
		}
		if !sleep(ctx, max(c.h.TTL/4, time.Millisecond)) {
			c.Errorf("%s: the case ran out of time: %v", contract, ctx.Err())
			return false
		}
	}
}

// pollTryLock is pollTry for l.TryLock of key.
func pollTryLock(ctx context.Context, l locker.Locker, key string, every time.Duration) (locker.Lock, error) {
	return pollTry(ctx, every, func(ctx context.Context, opts ...locker.LockOption) (locker.Lock, error) {
		return l.TryLock(ctx, key, opts...)
	})
}

// sleep waits for d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool { return driver.Sleep(ctx, d) }

// short quotes a key for messages, shortening long ones.
func short(key string) string {
	const max = 48
	if len(key) <= max {
		return fmt.Sprintf("%q", key)
	}
	return fmt.Sprintf("%q…(%d bytes)", key[:max], len(key))
}

// errList collects errors from a case's goroutines, which must not report
// themselves (only the case's own goroutine may call Fatalf).
type errList struct {
	mu    sync.Mutex
	n     int
	first []error
}

func (e *errList) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < 5 {
		e.first = append(e.first, err)
	}
}

// err is the collected errors as one (nil when none): how many, and the
// first ones.
func (e *errList) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == 0 {
		return nil
	}
	return fmt.Errorf("%d, the first ones: %w", e.n, errors.Join(e.first...))
}

// report fails the case when errors were collected.
func (e *errList) report(c *caseT, contract string) bool {
	c.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == 0 {
		return true
	}
	c.Errorf("%s: %d failures, the first ones: %v", contract, e.n, errors.Join(e.first...))
	return false
}
