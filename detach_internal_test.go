package locker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/leakcheck"
)

// stuckDriver is a tableDriver whose TryAcquire of key "a" and Release of
// key "b" ignore their ctx until let through, as a driver does that sets
// up a session under a timeout of its own.
type stuckDriver struct {
	*tableDriver
	acquires chan struct{} // closed to let TryAcquire of "a" through
	releases chan struct{} // closed to let Release of "b" through
	entered  chan string   // receives the key of every stuck call
}

func (d *stuckDriver) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if r.Key == "a" {
		d.entered <- r.Key
		<-d.acquires
	}
	return d.tableDriver.TryAcquire(ctx, r)
}

func (d *stuckDriver) Release(ctx context.Context, l driver.Lease) error {
	if l.Key == "b" {
		d.entered <- l.Key
		<-d.releases
	}
	return d.tableDriver.Release(ctx, l)
}

// returns waits (generously) for a call's outcome.
func returns(t *testing.T, what string, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not return when its ctx ended: it waits for a store call that ignores ctx", what)
		return nil
	}
}

// owned reports whether the table holds key.
func (d *tableDriver) owned(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.owners[key]
	return ok
}

func TestCallsReturnWhenTheirCtxEnds(t *testing.T) {
	d := &stuckDriver{tableDriver: newTableDriver(), acquires: make(chan struct{}), releases: make(chan struct{}), entered: make(chan string, 2)}
	e := newTestEngine(t, d)
	var letAcquires, letReleases sync.Once
	t.Cleanup(func() { // before Close, which waits for the stuck calls
		letAcquires.Do(func() { close(d.acquires) })
		letReleases.Do(func() { close(d.releases) })
	})

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := e.Lock(ctx, "a")
		errc <- err
	}()
	<-d.entered
	cancel()
	if err := returns(t, "Lock", errc); !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock whose ctx ended: got %v, want an error matching ErrNotAcquired and context.Canceled", err)
	}

	// The attempt goes on; the lock it gets is nobody's and is released.
	letAcquires.Do(func() { close(d.acquires) })
	deadline := time.Now().Add(10 * time.Second)
	for d.owned("a") {
		if time.Now().After(deadline) {
			t.Fatal("the lock a detached attempt got late is still held: nobody releases it")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Unlock: its release goes on in the background.
	lk, err := e.TryLock(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	uctx, ucancel := context.WithCancel(t.Context())
	go func() { errc <- lk.Unlock(uctx) }()
	<-d.entered
	ucancel()
	if err := returns(t, "Unlock", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("Unlock whose ctx ended: got %v, want an error matching context.Canceled", err)
	}
	select {
	case <-lk.Done():
	default:
		t.Error("Done is open after Unlock returned")
	}
	letReleases.Do(func() { close(d.releases) })
	for d.owned("b") {
		if time.Now().After(deadline) {
			t.Fatal("the release an Unlock left to the background never happened")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// workers counts the goroutines that are workers of e (see engine.run).
func workers(e *engine) int {
	n := 0
	for _, s := range leakcheck.Others() {
		if strings.Contains(s, fmt.Sprintf("locker.(*engine).worker(%p", e)) {
			n++
		}
	}
	return n
}

// TestDetachedCallsReuseWorkers: a driver without PromptCancel has its
// store calls made in workers of the engine that wait for the next call, so
// that a Locker in use does not start a goroutine for each; Close stops
// every worker.
func TestDetachedCallsReuseWorkers(t *testing.T) {
	l, err := New(newTableDriver(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	e := l.(*engine)
	ctx := t.Context()
	const rounds = 50 // 100 store calls, one after the other
	for range rounds {
		lk, err := e.TryLock(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A worker may still be on its way back to wait when the next call
	// comes, which then starts another: a few, not one per call.
	if n := workers(e); n < 1 || n > 10 {
		t.Errorf("%d workers wait after %d store calls made one after the other, want between 1 and 10", n, 2*rounds)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := workers(e); n != 0 {
		t.Errorf("%d workers left after Close, want none", n)
	}
}

// TestBackgroundCallsRunInline: the store calls of a caller whose ctx can
// never end run in the caller's goroutine, even for a driver without
// PromptCancel: no worker is started.
func TestBackgroundCallsRunInline(t *testing.T) {
	e := newTestEngine(t, newTableDriver(), WithTTL(time.Minute))
	for _, ctx := range []context.Context{context.Background(), context.WithoutCancel(t.Context())} {
		for range 20 {
			lk, err := e.TryLock(ctx, "c")
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := workers(e); n != 0 {
		t.Errorf("%d workers after store calls whose ctx could not end, want none: such calls run inline", n)
	}
}

// TestLockUnlockAllocations: a TryLock+Unlock, and an uncontended
// Lock+Unlock, allocate within a budget, with the store calls inline
// (PromptCancel, or a ctx that never ends) and detached; a detached call's
// state and its channel come from a pool of the engine and its arguments
// are no closure (14 before that), a key's gate is reused, an inline call
// builds no closures, a detached one builds nothing for a late outcome
// unless its caller gives up (18 before that, and before waiting on the
// caller's ctx instead of the call's), the call context of a ctx that
// never ends is not registered with Close (4 and 8 before this), and a
// hold whose Done nobody asks for makes no channel.
func TestLockUnlockAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	for _, tc := range []struct {
		prompt, cancellable bool
		budget              float64
	}{{true, false, 3}, {false, false, 3}, {false, true, 7}} {
		d := newTableDriver()
		d.prompt = tc.prompt
		e := newTestEngine(t, d)
		ctx := context.Background()
		if tc.cancellable {
			ctx = t.Context()
		}
		for _, op := range []struct {
			name string
			lock func(context.Context, string, ...LockOption) (Lock, error)
		}{{"TryLock", e.TryLock}, {"Lock", e.Lock}} {
			n := testing.AllocsPerRun(200, func() {
				lk, err := op.lock(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if err := lk.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("%s, PromptCancel %v, cancellable ctx %v: %v allocations", op.name, tc.prompt, tc.cancellable, n)
			if n > tc.budget {
				t.Errorf("PromptCancel %v, cancellable ctx %v: %s+Unlock makes %v allocations, want at most %v", tc.prompt, tc.cancellable, op.name, n, tc.budget)
			}
		}
	}
}

// TestLockMultiUnlockAllocations: a LockMulti+Unlock of three keys taken in
// one driver call allocates within a budget. With a ctx that never ends,
// the call is inline and builds nothing for a late outcome, and its call
// context is not registered with Close. The holds are one allocation with
// their gate tickets and handles, the owners one string, and each key's
// gate is reused (39 before these), and holds whose Done nobody asks for
// make no channel (24 before that). With a cancellable ctx, the detached
// take and release come from pools of the engine, their arguments no
// closures (33 before that).
func TestLockMultiUnlockAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	e := newTestEngine(t, newNotifyMultiDriver(), WithTTL(time.Minute))
	keys := []string{"a", "b", "c"}
	for _, tc := range []struct {
		ctx    context.Context
		budget float64
	}{{context.Background(), 21}, {t.Context(), 25}} {
		n := testing.AllocsPerRun(200, func() {
			m, err := LockMulti(tc.ctx, e, keys)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Unlock(tc.ctx); err != nil {
				t.Fatal(err)
			}
		})
		cancellable := tc.ctx.Done() != nil
		t.Logf("cancellable ctx %v: %v allocations", cancellable, n)
		if n > tc.budget {
			t.Errorf("cancellable ctx %v: LockMulti+Unlock of three keys makes %v allocations, want at most %v", cancellable, n, tc.budget)
		}
	}
}

// holdingDriver is a tableDriver whose TryAcquire of the keys in let waits
// until that key's channel is closed, whatever its ctx says.
type holdingDriver struct {
	*tableDriver
	let      map[string]chan struct{}
	entered  chan string // receives the key of every held call
	answered chan string // receives it again once the table has answered
}

func (d *holdingDriver) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	ch, ok := d.let[r.Key]
	if !ok {
		return d.tableDriver.TryAcquire(ctx, r)
	}
	d.entered <- r.Key
	<-ch
	defer func() { d.answered <- r.Key }()
	return d.tableDriver.TryAcquire(ctx, r)
}

// TestAbandonedCallIsNotReused: the bookkeeping of a detached attempt
// whose caller has returned stays with its worker. The next attempt,
// still running when the abandoned one ends, gets its own outcome, and
// the abandoned one's late grant is released. Were the abandoned call
// handed to the next one (its pool reusing it), the late grant would go
// to that caller instead, and nobody would release it.
func TestAbandonedCallIsNotReused(t *testing.T) {
	d := &holdingDriver{tableDriver: newTableDriver(),
		let:     map[string]chan struct{}{"a": make(chan struct{}), "c": make(chan struct{})},
		entered: make(chan string, 2), answered: make(chan string, 2)}
	e := newTestEngine(t, d)
	var letA, letC sync.Once
	t.Cleanup(func() { // before Close, which waits for the held calls
		letA.Do(func() { close(d.let["a"]) })
		letC.Do(func() { close(d.let["c"]) })
	})

	// One goroutine makes both calls, so that a pool that took the
	// abandoned call back would most likely hand it to the second.
	actx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	type result struct {
		lk  Lock
		err error
	}
	resc := make(chan result, 1)
	go func() {
		_, err := e.TryLock(actx, "a")
		errc <- err
		lk, err := e.TryLock(t.Context(), "c")
		resc <- result{lk, err}
	}()
	<-d.entered
	cancel()
	if err := returns(t, "TryLock", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLock whose ctx ended: got %v, want an error matching context.Canceled", err)
	}
	<-d.entered
	letA.Do(func() { close(d.let["a"]) })
	<-d.answered // "a" is granted: its late outcome is on its way
	deadline := time.Now().Add(10 * time.Second)
	for d.owned("a") {
		if time.Now().After(deadline) {
			t.Fatal("the grant of an abandoned attempt is still held: it went to another call")
		}
		time.Sleep(10 * time.Millisecond)
	}
	letC.Do(func() { close(d.let["c"]) })
	r := <-resc
	if r.err != nil {
		t.Fatalf("TryLock of c: %v", r.err)
	}
	if err := r.lk.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock of c: %v: the lock did not come from its own attempt", err)
	}
	if d.owned("c") {
		t.Error("c is still held after its Unlock: its attempt's grant went to nobody")
	}
}
