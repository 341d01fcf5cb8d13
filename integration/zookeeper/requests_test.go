package zookeeper_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// countedLocker is a Locker with the test TTL on a connection of its own
// whose requests c counts, closed when the test ends. It has locked a key
// of its own once: it knows which ACL the connection may set (see
// zookeeper.Config.ACL).
func countedLocker(tb testing.TB, srv *testenv.ZooKeeperServer, c *opCounter) locker.Locker {
	tb.Helper()
	conn, events := countedConn(tb, srv, c)
	l, err := zookeeper.New(conn, events, locker.WithTTL(testTTL))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	if err := lockUnlock(tb.Context(), l, uniqueKey(tb)); err != nil {
		tb.Fatal(err)
	}
	return l
}

// gate holds back the first request of kind until it is opened: a
// func for opCounter.before.
type gate struct {
	kind      string
	held      chan struct{} // closed when the request is held
	open      chan struct{} // closed to let it go
	heldFirst bool          // read and written in the send loop only
}

func newGate(kind string) *gate {
	return &gate{kind: kind, held: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) before(kind string) {
	if kind != g.kind || g.heldFirst {
		return
	}
	g.heldFirst = true
	close(g.held)
	select {
	case <-g.open:
	case <-time.After(time.Minute):
	}
}

// gatedWaiter starts a Lock and Unlock of key by a Locker of its own whose
// requests it counts, and returns once that Lock holds back its first
// getData (a watch of a node ahead of it) at the gate: the counts from the
// Lock on, the gate, and the channel that receives the outcome.
func gatedWaiter(t *testing.T, srv *testenv.ZooKeeperServer, key string) (*opCounter, *gate, <-chan error) {
	t.Helper()
	g := newGate("getData")
	c := &opCounter{before: g.before}
	waiter := countedLocker(t, srv, c)
	c.take()
	got := make(chan error, 1)
	go func() { got <- lockUnlock(t.Context(), waiter, key) }()
	select {
	case <-g.held:
	case err := <-got:
		t.Fatalf("the waiter's Lock returned (%v) before it watched a node ahead of it", err)
	case <-time.After(time.Minute):
		t.Fatal("the waiter never watched a node ahead of it")
	}
	return c, g, got
}

// lockRequests are the requests a Lock sent, without the pings and the
// holder's watch of its own node, which come with time.
func lockRequests(c *opCounter) opCounts {
	o := c.take()
	delete(o, "ping")
	delete(o, "getData(own)")
	return o
}

// lockUnlock takes key with l, waiting for it, and lets it go.
func lockUnlock(ctx context.Context, l locker.Locker, key string) error {
	lk, err := l.Lock(ctx, key)
	if err != nil {
		return err
	}
	return lk.Unlock(ctx)
}

// TestHandoffRequests: a lock costs the server no request that tells it
// nothing new. An uncontended Lock and Unlock send one multi-operation and
// one delete. A waiter that finds the node it is about to watch already
// gone learns from the "no node" what the node's deletion event would have
// told it: behind the holder, the lock is its own; two places back, the
// waiter before it is now first, and it waits for that one's deletion. In
// neither case does it list the queue again (go-zookeeper's zk.Lock does).
// A waiter farther back lists the queue when the node two places ahead of
// it goes, while the waiter before it holds the lock, and takes the lock
// on that one's release with no listing on the hand-off's path.
func TestHandoffRequests(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	e := newEnv(t, srv)
	ctx := testCtx(t, time.Minute)
	check := func(t *testing.T, what string, got, want opCounts) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Errorf("%s sent %v; want %v", what, got, want)
		}
	}

	t.Run("uncontended", func(t *testing.T) {
		var c opCounter
		l := countedLocker(t, srv, &c)
		key := uniqueKey(t)
		if err := lockUnlock(ctx, l, key); err != nil { // the key's node
			t.Fatal(err)
		}
		c.take()
		if err := lockUnlock(ctx, l, key); err != nil {
			t.Fatal(err)
		}
		check(t, "an uncontended Lock and Unlock", lockRequests(&c), opCounts{"multi(create,setData)": 1, "delete": 1})
	})

	t.Run("holder gone before the watch", func(t *testing.T) {
		key := uniqueKey(t)
		holder, err := e.mustLocker(t).Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		// The waiter lists the queue, finds the holder first, and is about
		// to watch its node: the holder lets go first.
		c, g, got := gatedWaiter(t, srv, key)
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		close(g.open)
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		check(t, "a waiter whose holder was gone when its watch came", lockRequests(c),
			opCounts{"multi(create,setData)": 1, "getChildren2": 1, "getData": 1, "delete": 1})
	})

	t.Run("first gone before the watch, two places back", func(t *testing.T) {
		key := uniqueKey(t)
		holder, err := e.mustLocker(t).Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		first := make(chan locker.Lock, 1)
		l := e.mustLocker(t)
		go func() {
			lk, err := l.Lock(ctx, key)
			if err != nil {
				t.Error(err)
			}
			first <- lk
		}()
		for len(e.children(t, key)) < 2 {
			if ctx.Err() != nil {
				t.Fatal("the first waiter never queued")
			}
			time.Sleep(2 * time.Millisecond)
		}
		// The waiter lists the holder and the first waiter ahead of it,
		// and is about to watch both: the holder lets go first.
		c, g, got := gatedWaiter(t, srv, key)
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		lk := <-first
		if lk == nil {
			t.FailNow()
		}
		q := sortedQueue(t, e, key)
		close(g.open)
		// The first waiter holds the lock until the waiter watches it.
		waitWatchers(t, e, zookeeper.QueuePath(zookeeper.DefaultRoot, key)+"/"+q[0], 1)
		select {
		case err := <-got:
			t.Fatalf("the waiter's Lock returned (%v) while the lock was held", err)
		default:
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		check(t, "a waiter two places back whose holder was gone when its watches came", lockRequests(c),
			opCounts{"multi(create,setData)": 1, "getChildren2": 1, "getData": 2, "delete": 1})
	})

	t.Run("three places back, no listing on the hand-off", func(t *testing.T) {
		key := uniqueKey(t)
		holder, err := e.mustLocker(t).Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		// Two waiters queue behind the holder, each handing its lock on.
		var waiters [2]chan locker.Lock
		for i := range waiters {
			waiters[i] = make(chan locker.Lock, 1)
			l := e.mustLocker(t)
			go func() {
				lk, err := l.Lock(ctx, key)
				if err != nil {
					t.Error(err)
				}
				waiters[i] <- lk
			}()
			for len(e.children(t, key)) < i+2 {
				if ctx.Err() != nil {
					t.Fatal("a waiter never queued")
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		listed := make(chan struct{}, 4)
		c := &opCounter{before: func(kind string) {
			if kind == "getChildren2" {
				select {
				case listed <- struct{}{}:
				default:
				}
			}
		}}
		l := countedLocker(t, srv, c)
		got := make(chan error, 1)
		go func() { got <- lockUnlock(ctx, l, key) }()
		<-listed // its first listing, on arrival
		// The waiter watches both nodes ahead of it before the holder lets
		// go: a listing that came back after the holder's deletion would
		// find it two places back, where no listing is due.
		q := sortedQueue(t, e, key)
		if len(q) != 4 {
			t.Fatalf("queue %v, want the holder, two waiters and the waiter", q)
		}
		parent := zookeeper.QueuePath(zookeeper.DefaultRoot, key)
		waitWatchers(t, e, parent+"/"+q[1], 2) // the first waiter's successor's and the waiter's
		waitWatchers(t, e, parent+"/"+q[2], 1)
		takeTurn := func(lk locker.Lock, next chan locker.Lock) locker.Lock {
			t.Helper()
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			lk = <-next
			if lk == nil {
				t.FailNow()
			}
			return lk
		}
		first := takeTurn(holder, waiters[0])
		second := takeTurn(first, waiters[1])
		// The first waiter's deletion makes the second one the holder; the
		// waiter, which watched it two places ahead, lists the queue while
		// the second waiter holds the lock.
		select {
		case <-listed:
		case <-ctx.Done():
			t.Fatal("the waiter did not list the queue after the node two places ahead of it went")
		}
		c.take()
		if err := second.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		check(t, "a waiter three places back, from its predecessor's release on", lockRequests(c), opCounts{"delete": 1})
	})
}
