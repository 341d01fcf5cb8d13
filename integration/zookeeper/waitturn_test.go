package zookeeper_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
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

// waitWatched waits until the server reports a watch on node (wchp), and
// reports whether it saw one: false when the server cannot tell or the
// watch did not come within 5 s.
func waitWatched(t *testing.T, e *env, node string) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		w, err := watchesByPath(e.srv.Servers()[0], node)
		if err != nil {
			t.Logf("cannot read the server's watches: %v", err)
			return false
		}
		if w[node] > 0 {
			return true
		}
	}
	return false
}

// TestWaiterBehindGoneWaiterKeepsWaiting: a waiter takes the lock on its
// predecessor's deletion without listing the queue again only when that
// predecessor was first in line; a waiter whose predecessor was itself a
// waiter, and gave up, must look again and keep waiting for the holder.
func TestWaiterBehindGoneWaiterKeepsWaiting(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, time.Minute)
	key := uniqueKey(t)
	parent := zookeeper.QueuePath(zookeeper.DefaultRoot, key)
	holder, err := e.mustLocker(t).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The first waiter queues, the second behind it.
	wctx1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	l1, l2 := e.mustLocker(t), e.mustLocker(t)
	first := make(chan error, 1)
	go func() {
		lk, err := l1.Lock(wctx1, key)
		if err == nil {
			_ = lk.Unlock(ctx)
		}
		first <- err
	}()
	for len(e.children(t, key)) < 2 {
		time.Sleep(2 * time.Millisecond)
	}
	var secondLock locker.Lock
	second := make(chan error, 1)
	go func() {
		var err error
		secondLock, err = l2.Lock(ctx, key)
		second <- err
	}()
	for len(e.children(t, key)) < 3 {
		time.Sleep(2 * time.Millisecond)
	}
	queue := sortedQueue(t, e, key)
	if !waitWatched(t, e, parent+"/"+queue[1]) {
		t.Log("the second waiter's watch on the first waiter's node was not seen; the case may not reach its point")
	}
	// The first waiter gives up: its node goes, and the second waiter's
	// watch fires while the holder still holds.
	cancel1()
	if err := <-first; !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("the cancelled waiter: %v, want ErrNotAcquired", err)
	}
	// The second waiter looks again and watches the holder; it must not
	// have the lock meanwhile.
	watched := waitWatched(t, e, parent+"/"+queue[0])
	select {
	case err := <-second:
		if err == nil {
			t.Fatalf("a waiter whose predecessor (a waiter, not the holder) gave up got the lock while the holder held it: a key must never be granted to two holders at once")
		}
		t.Fatalf("the second waiter: %v", err)
	default:
	}
	if !watched {
		t.Log("the second waiter's watch on the holder's node was not seen")
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the second waiter after the holder unlocked: %v", err)
	}
	_ = secondLock.Unlock(ctx)
}

// TestLongWaitGrantsFullValidity: a waiter that waited longer than the
// validity counts its lock from a proof of its session's life sent after
// the holder let go, not from its create: the lock it gets has its whole
// validity ahead, and is not lost at once. (A grant counted from the create
// would have its deadline behind it.)
func TestLongWaitGrantsFullValidity(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, time.Minute)
	key := uniqueKey(t)
	holder, err := e.mustLocker(t).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, hold := range []time.Duration{testTTL / 8, testTTL} { // within the create's proof, and far beyond it
		l := e.mustLocker(t)
		var lk locker.Lock
		waiter := make(chan error, 1)
		go func() {
			var err error
			lk, err = l.Lock(ctx, key)
			waiter <- err
		}()
		for len(e.children(t, key)) < 2 {
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(hold)
		released := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-waiter; err != nil {
			t.Fatalf("waiter after %v: %v", hold, err)
		}
		// The validity the engine counts on is 90% of the TTL less 1 ms
		// from the proof of life: after a long wait, a request sent after
		// the holder's Unlock began.
		floor := released.Add(testTTL - testTTL/10 - time.Millisecond)
		if hold >= testTTL/4 && lk.Deadline().Before(floor) {
			t.Errorf("after a wait of %v the lock's deadline is %v after the holder's Unlock began, want at least %v: a lock granted after a long wait must count its validity from a proof of life sent after the wait",
				hold, lk.Deadline().Sub(released).Round(time.Millisecond), floor.Sub(released))
		}
		select {
		case <-lk.Done():
			t.Fatalf("after a wait of %v the lock was lost at once: %v", hold, lk.Err())
		default:
		}
		holder = lk
	}
	_ = holder.Unlock(ctx)
}
