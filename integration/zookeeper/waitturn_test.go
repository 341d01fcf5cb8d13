package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// sortedQueue lists key's lock nodes in sequence order.
func sortedQueue(t *testing.T, e *env, key string) []string {
	t.Helper()
	q := e.children(t, key)
	slices.SortFunc(q, func(a, b string) int {
		return strings.Compare(a[strings.LastIndex(a, "-"):], b[strings.LastIndex(b, "-"):])
	})
	return q
}

// watchers returns how many sessions watch node (wchp), or -1 when the
// server cannot tell.
func watchers(t *testing.T, e *env, node string) int {
	t.Helper()
	w, err := watchesByPath(e.srv.Servers()[0], node)
	if err != nil {
		t.Logf("cannot read the server's watches: %v", err)
		return -1
	}
	return w[node]
}

// waitWatchers waits up to 5 s until at least n sessions watch node, and
// logs when they do not (the case may then not reach its point).
func waitWatchers(t *testing.T, e *env, node string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if w := watchers(t, e, node); w < 0 || w >= n {
			return
		}
	}
	t.Logf("fewer than %d watches on %s after 5 s", n, node)
}

// TestWaiterBehindGoneWaitersKeepsWaiting: a waiter takes the lock on its
// predecessor's deletion without listing the queue again only when it knew
// that predecessor first in line; a waiter whose predecessor was itself a
// waiter and gave up must look again and keep waiting for the holder. A
// round in which the holder lost its lock only because no renewal came
// back in time (rerun.StarvedLoss: a waiter then takes the key rightly)
// says nothing, and runs again, up to three rounds; a waiter that got the
// key while the holder held it, or a holder lost any other way, fails at
// once.
func TestWaiterBehindGoneWaitersKeepsWaiting(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, 3*time.Minute)
	rerun.Starved(t, 3, func(int) error { return goneWaitersRound(ctx, t, e, uniqueKey(t)) })
}

// goneWaitersRound is one round of TestWaiterBehindGoneWaitersKeepsWaiting
// on key. It returns the holder's loss to renewals that never came back,
// and fails t on any other fault.
func goneWaitersRound(ctx context.Context, t *testing.T, e *env, key string) error {
	parent := zookeeper.QueuePath(zookeeper.DefaultRoot, key)
	holder, err := e.mustLocker(t).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Unlock(ctx) }()
	// A grant to a waiter says nothing once the holder starved.
	starved := func() error { return starvedLoss(holder) }
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Two waiters queue, and a third behind them.
	var gaveUp [2]chan error
	var cancels [2]context.CancelFunc
	for i := range gaveUp {
		wctx, cancel := context.WithCancel(rctx)
		defer cancel()
		cancels[i] = cancel
		gaveUp[i] = make(chan error, 1)
		l := e.mustLocker(t)
		go func() {
			lk, err := l.Lock(wctx, key)
			if err == nil {
				_ = lk.Unlock(ctx)
			}
			gaveUp[i] <- err
		}()
		if err := e.awaitQueued(ctx, t, key, i+2, fmt.Sprintf("waiter %d never queued", i), holder); err != nil {
			return err
		}
	}
	last := e.mustLocker(t)
	var lastLock locker.Lock
	lastDone := make(chan error, 1)
	go func() {
		var err error
		lastLock, err = last.Lock(rctx, key)
		lastDone <- err
	}()
	var lastErr *error // the last waiter's outcome, once received
	defer func() {
		cancel()
		if lastErr == nil {
			err := <-lastDone
			lastErr = &err
		}
		if *lastErr == nil {
			_ = lastLock.Unlock(ctx)
		}
	}()
	if err := e.awaitQueued(ctx, t, key, 4, "the last waiter never queued", holder); err != nil {
		return err
	}
	queue := sortedQueue(t, e, key)
	notYet := func(when string) error {
		t.Helper()
		select {
		case err := <-lastDone:
			lastErr = &err
			if s := starved(); s != nil {
				return s
			}
			if err == nil {
				t.Fatalf("%s, the last waiter got the lock while the holder held it: a key must never be granted to two holders at once", when)
			}
			t.Fatalf("the last waiter: %v", err)
		default:
		}
		return nil
	}
	// The last waiter watches the second waiter's node; the second, the
	// first's and the holder's (first in line).
	waitWatchers(t, e, parent+"/"+queue[2], 1)
	waitWatchers(t, e, parent+"/"+queue[1], 1)
	// The first waiter gives up: the second one's predecessor goes while
	// the holder holds.
	cancels[0]()
	if err := <-gaveUp[0]; !errors.Is(err, locker.ErrNotAcquired) {
		if s := starved(); s != nil {
			return s
		}
		t.Fatalf("the first waiter, cancelled: %v, want ErrNotAcquired", err)
	}
	time.Sleep(100 * time.Millisecond) // the second waiter's turn to (wrongly) take it
	select {
	case err := <-gaveUp[1]:
		if s := starved(); s != nil {
			return s
		}
		if err == nil {
			t.Fatal("after the first waiter gave up, the second waiter got the lock while the holder held it: a key must never be granted to two holders at once")
		}
		t.Fatalf("the second waiter: %v", err)
	default:
	}
	if err := notYet("after the first waiter gave up"); err != nil {
		return err
	}
	// The second waiter gives up: the last waiter's predecessor goes while
	// the holder holds.
	cancels[1]()
	if err := <-gaveUp[1]; !errors.Is(err, locker.ErrNotAcquired) {
		if s := starved(); s != nil {
			return s
		}
		t.Fatalf("the second waiter, cancelled: %v, want ErrNotAcquired", err)
	}
	time.Sleep(100 * time.Millisecond) // the last waiter's turn to (wrongly) take it
	if err := notYet("after the second waiter gave up"); err != nil {
		return err
	}
	if err := holder.Unlock(ctx); err != nil {
		if s := starved(); s != nil {
			return s
		}
		t.Fatal(err)
	}
	err = <-lastDone
	lastErr = &err
	if err != nil {
		t.Fatalf("the last waiter after the holder unlocked: %v", err)
	}
	return nil
}

// TestLongWaitGrantsFullValidity: a waiter that waited longer than the
// validity counts its lock from a proof of its session's life sent after
// the holder let go, not from its create: the lock it gets has its whole
// validity ahead, and is not lost at once. (A grant counted from the create
// would have its deadline behind it.) A round in which a holder lost its
// lock only because no renewal came back in time (rerun.StarvedLoss: the
// waiter then got the key before the Unlock the check counts from), or
// the new lock was so lost before the check, says nothing, and runs again,
// up to three rounds; a short deadline, or a lock lost any other way,
// fails at once.
func TestLongWaitGrantsFullValidity(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, 3*time.Minute)
	rerun.Starved(t, 3, func(int) error { return longWaitRound(ctx, t, e, uniqueKey(t)) })
}

// longWaitRound is one round of TestLongWaitGrantsFullValidity on key. It
// returns a holder's loss to renewals that never came back, and fails t on
// any other fault.
func longWaitRound(ctx context.Context, t *testing.T, e *env, key string) error {
	holder, err := e.mustLocker(t).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The round's last lock: the holder, or the waiter that took over.
	defer func() { _ = holder.Unlock(ctx) }()
	for _, hold := range []time.Duration{testTTL / 8, testTTL} { // within the create's proof, and far beyond it
		l := e.mustLocker(t)
		var lk locker.Lock
		waiter := make(chan error, 1)
		go func() {
			var err error
			lk, err = l.Lock(ctx, key)
			waiter <- err
		}()
		starved := e.awaitQueued(ctx, t, key, 2, "the waiter never queued", holder)
		if starved == nil {
			time.Sleep(hold)
		}
		released := time.Now()
		unlocked := holder.Unlock(ctx)
		if err := <-waiter; err != nil {
			t.Fatalf("waiter after %v: %v", hold, err)
		}
		prev := holder
		holder = lk
		if starved != nil {
			return starved
		}
		if unlocked != nil {
			if starved := starvedLoss(prev); starved != nil {
				return starved
			}
			t.Fatalf("the holder's Unlock after %v: %v", hold, unlocked)
		}
		// The validity the engine counts on is 90% of the TTL less 1 ms
		// from the proof of life: after a long wait, a request sent after
		// the holder's Unlock began.
		floor := released.Add(testTTL - testTTL/10 - time.Millisecond)
		if hold >= testTTL/4 && lk.Deadline().Before(floor) {
			t.Fatalf("after a wait of %v the lock's deadline is %v after the holder's Unlock began, want at least %v: a lock granted after a long wait must count its validity from a proof of life sent after the wait",
				hold, lk.Deadline().Sub(released).Round(time.Millisecond), floor.Sub(released))
		}
		select {
		case <-lk.Done():
			if starved := starvedLoss(lk); starved != nil {
				return starved
			}
			t.Fatalf("after a wait of %v the lock was lost at once: %v", hold, lk.Err())
		default:
		}
	}
	return nil
}
