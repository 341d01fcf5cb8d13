package zookeeper

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// multiReqs returns the requests of a multi-key attempt on keys.
func multiReqs(keys ...string) []driver.Request {
	reqs := make([]driver.Request, len(keys))
	for i, k := range keys {
		reqs[i] = driver.Request{Key: k, Owner: rand.Text(), Label: "multi", TTL: sharedTTL, Lost: func(error) {}}
	}
	return reqs
}

// lockNodes returns the lock nodes of key's queue in d's root.
func lockNodes(t *testing.T, d *zkDriver, key string) []share {
	t.Helper()
	c, _, err := d.conn.Children(d.parentOf(key))
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	return queueOf(c)
}

// keyStat returns the stat of key's node in d's root, nil when it is
// missing.
func keyStat(t *testing.T, d *zkDriver, key string) *zk.Stat {
	t.Helper()
	ok, st, err := d.conn.Exists(d.parentOf(key))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return nil
	}
	return st
}

// takeKey takes key through d with TryAcquire, or fails t.
func takeKey(ctx context.Context, t *testing.T, d *zkDriver, key string) driver.Grant {
	t.Helper()
	req := multiReqs(key)[0]
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("TryAcquire(%s): %v", key, err)
	}
	return g
}

// touchKey creates key's node, empty: a lock taken and released.
func touchKey(ctx context.Context, t *testing.T, d *zkDriver, key string) {
	t.Helper()
	g := takeKey(ctx, t, d, key)
	if err := d.Release(ctx, driver.Lease{Key: key, State: g.State}); err != nil {
		t.Fatal(err)
	}
}

// TestMultiLosesToConcurrentCreate: a lock node that joins one queue
// between the listings and the multi-operation makes it take nothing.
func TestMultiLosesToConcurrentCreate(t *testing.T) {
	multiLoses(t, false)
}

// TestMultiKeyNodeMadeAgain: a key node deleted and made again between the
// listings and the multi-operation, whose data version is back where it
// was with another's lock node in its queue, makes the attempt take
// nothing.
func TestMultiKeyNodeMadeAgain(t *testing.T) {
	multiLoses(t, true)
}

// multiLoses has a rival take key b (at data version 1, after its node is
// made again when again is set) between the listings and the
// multi-operation of an attempt on a, b and c, and checks that the attempt
// answers ErrHeld and leaves only the rival's node.
func multiLoses(t *testing.T, again bool) {
	ds, _, ctx := limitDrivers(t, 2)
	touchKey(ctx, t, ds[0], "b") // b's node, empty, at data version 1
	var rival []share
	ds[0].hooks.beforeMulti = func() {
		ds[0].hooks.beforeMulti = nil
		if again {
			if err := ds[1].conn.Delete(ds[1].parentOf("b"), -1); err != nil {
				t.Fatal(err)
			}
		}
		takeKey(ctx, t, ds[1], "b")
		rival = lockNodes(t, ds[1], "b")
		if v := keyStat(t, ds[1], "b").Version; again && v != 1 {
			t.Fatalf("b's node made again is at data version %d; the test wants 1", v)
		}
	}
	gs, err := ds[0].TryAcquireMulti(ctx, multiReqs("a", "b", "c"))
	if !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("TryAcquireMulti with b taken before its write (its node made again: %v) = %v, %v; want ErrHeld", again, gs, err)
	}
	onlyRival(t, ds[0], rival)
}

// onlyRival checks that keys a and c have no lock node, and b only rival.
func onlyRival(t *testing.T, d *zkDriver, rival []share) {
	t.Helper()
	for _, k := range []string{"a", "c"} {
		if n := lockNodes(t, d, k); len(n) != 0 {
			t.Errorf("%s: lock nodes %v left by an attempt that lost", k, n)
		}
	}
	if n := lockNodes(t, d, "b"); len(n) != 1 || len(rival) != 1 || n[0] != rival[0] {
		t.Errorf("b: lock nodes %v; want only the rival's %v", n, rival)
	}
}

// TestMultiRecalledKeyTaken: a take of keys this Locker freed, which skips
// the listings, takes nothing when one of them was taken since.
func TestMultiRecalledKeyTaken(t *testing.T) {
	multiRecalledLoses(t, false)
}

// TestMultiRecalledKeyMadeAgain: a take of keys this Locker freed takes
// nothing when the node of one of them was deleted and made again since,
// at the same data version, with another's lock node in its queue.
func TestMultiRecalledKeyMadeAgain(t *testing.T) {
	multiRecalledLoses(t, true)
}

// multiRecalledLoses takes and releases keys a, b and c with one
// multi-operation each, has a rival take b (its node made again first
// when again is set), and checks that a take of a, b and c answers
// ErrHeld and leaves only the rival's node.
func multiRecalledLoses(t *testing.T, again bool) {
	ds, _, ctx := limitDrivers(t, 2)
	multiTakeRelease(ctx, t, ds[0], "a", "b", "c") // b's node at data version 1
	ds[0].mu.Lock()
	remembered := len(ds[0].free)
	ds[0].mu.Unlock()
	if remembered != 3 {
		t.Fatalf("the Locker remembers %d keys freed; want 3, for the take to skip its listings", remembered)
	}
	if again {
		if err := ds[1].conn.Delete(ds[1].parentOf("b"), -1); err != nil {
			t.Fatal(err)
		}
	}
	takeKey(ctx, t, ds[1], "b")
	if v := keyStat(t, ds[1], "b").Version; again && v != 1 {
		t.Fatalf("b's node made again is at data version %d; the test wants 1", v)
	}
	rival := lockNodes(t, ds[1], "b")
	gs, err := ds[0].TryAcquireMulti(ctx, multiReqs("a", "b", "c"))
	if !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("TryAcquireMulti of freed keys with b taken since (its node made again: %v) = %v, %v; want ErrHeld", again, gs, err)
	}
	onlyRival(t, ds[0], rival)
	ds[0].mu.Lock()
	contended := ds[0].free[ds[0].parentOf("b")].contended
	ds[0].mu.Unlock()
	if !contended {
		t.Error("b is not marked contended after a take that recalled it lost: the next take would recall it again")
	}
}

// TestMultiMissingKeyNode: keys whose nodes are missing (the root's too,
// or one key's of several) are taken, each with one lock node.
func TestMultiMissingKeyNode(t *testing.T) {
	t.Run("root", func(t *testing.T) {
		d, ctx := sharedDriver(t) // a root nobody created
		multiTakeRelease(ctx, t, d, "a", "b")
	})
	t.Run("one", func(t *testing.T) {
		d, ctx := sharedDriver(t)
		touchKey(ctx, t, d, "b")
		if keyStat(t, d, "a") != nil || keyStat(t, d, "b") == nil {
			t.Fatal("want a's node missing and b's there")
		}
		multiTakeRelease(ctx, t, d, "a", "b")
	})
}

// multiTakeRelease takes keys with TryAcquireMulti, checks each has one
// lock node and a token, and releases them with ReleaseMulti.
func multiTakeRelease(ctx context.Context, t *testing.T, d *zkDriver, keys ...string) {
	t.Helper()
	reqs := multiReqs(keys...)
	gs, err := d.TryAcquireMulti(ctx, reqs)
	if err != nil {
		t.Fatalf("TryAcquireMulti(%q): %v", keys, err)
	}
	ls := make([]driver.Lease, len(gs))
	for i, g := range gs {
		if g.Token == 0 || g.Token != gs[0].Token {
			t.Errorf("%s: token %d; want the multi-operation's zxid %d", keys[i], g.Token, gs[0].Token)
		}
		if n := lockNodes(t, d, keys[i]); len(n) != 1 {
			t.Errorf("%s: lock nodes %v; want one", keys[i], n)
		}
		ls[i] = driver.Lease{Key: keys[i], Owner: reqs[i].Owner, Token: g.Token, State: g.State}
	}
	errs, err := d.ReleaseMulti(ctx, ls)
	if err := errors.Join(append(errs, err)...); err != nil {
		t.Fatalf("ReleaseMulti: %v", err)
	}
	for _, k := range keys {
		if n := lockNodes(t, d, k); len(n) != 0 {
			t.Errorf("%s: lock nodes %v after ReleaseMulti", k, n)
		}
	}
}

// TestMultiHeldWritesNothing: a held key, or one held by shared holds,
// makes TryAcquireMulti refuse with nothing written: no key node created,
// no key node's data or children changed.
func TestMultiHeldWritesNothing(t *testing.T) {
	ds, _, ctx := limitDrivers(t, 2)
	touchKey(ctx, t, ds[0], "a")
	takeKey(ctx, t, ds[1], "b")
	if _, err := ds[1].TryAcquireShared(ctx, multiReqs("s")[0], permitsOf(2, 1)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		keys []string
		want error
	}{
		{[]string{"a", "b", "c"}, driver.ErrHeld},
		{[]string{"a", "c", "s"}, driver.ErrConflict},
	} {
		before := map[string]*zk.Stat{}
		for _, k := range c.keys {
			before[k] = keyStat(t, ds[0], k)
		}
		gs, err := ds[0].TryAcquireMulti(ctx, multiReqs(c.keys...))
		if !errors.Is(err, c.want) {
			t.Fatalf("TryAcquireMulti(%q) = %v, %v; want %v", c.keys, gs, err, c.want)
		}
		for _, k := range c.keys {
			b, a := before[k], keyStat(t, ds[0], k)
			switch {
			case b == nil && a != nil:
				t.Errorf("%q: %s: key node created by a refused attempt", c.keys, k)
			case b != nil && (a == nil || a.Version != b.Version || a.Cversion != b.Cversion):
				t.Errorf("%q: %s: key node changed by a refused attempt: %+v, was %+v", c.keys, k, a, b)
			}
		}
	}
}

// TestMultiUnknownOutcomeUndone: a multi-operation whose caller's ctx ends
// before its reply comes leaves no lock node once its outcome is known.
func TestMultiUnknownOutcomeUndone(t *testing.T) {
	d, ctx := sharedDriver(t)
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		touchKey(ctx, t, d, k)
	}
	before := keyStat(t, d, "a").Version
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.hooks.beforeMulti = cancel
	gs, err := d.TryAcquireMulti(actx, multiReqs(keys...))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquireMulti with its ctx cancelled before its write = %v, %v; want context.Canceled", gs, err)
	}
	// The multi-operation was sent: it wrote the key nodes.
	if !eventually(ctx, func() bool { return keyStat(t, d, "a").Version > before }) {
		t.Fatal("the multi-operation was never applied: the test proves nothing")
	}
	for _, k := range keys {
		if !eventually(ctx, func() bool { return len(lockNodes(t, d, k)) == 0 }) {
			t.Errorf("%s: lock nodes %v left by an abandoned multi-operation", k, lockNodes(t, d, k))
		}
	}
}

// TestAcquireMultiWaits: a waiting multi-key attempt takes every key once
// the holder of one releases it, and holds nothing before.
func TestAcquireMultiWaits(t *testing.T) {
	ds, _, ctx := limitDrivers(t, 2)
	g := takeKey(ctx, t, ds[1], "b")
	type outcome struct {
		gs  []driver.Grant
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		gs, err := ds[0].AcquireMulti(ctx, multiReqs("a", "b"))
		done <- outcome{gs, err}
	}()
	// Whatever the attempts so far, a holds no node of the waiter's.
	time.Sleep(100 * time.Millisecond)
	if n := lockNodes(t, ds[0], "a"); len(n) != 0 {
		t.Errorf("a: lock nodes %v while the waiter waits for b", n)
	}
	if err := ds[1].Release(ctx, driver.Lease{Key: "b", State: g.State}); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		if o.err != nil || len(o.gs) != 2 || !o.gs[1].Queued {
			t.Fatalf("AcquireMulti = %+v, %v; want two grants, queued", o.gs, o.err)
		}
	case <-ctx.Done():
		t.Fatal("AcquireMulti did not return after b was released")
	}
}

// TestReleaseMultiNodeGone: a lease whose node is gone answers ErrNotHeld,
// and the others are released.
func TestReleaseMultiNodeGone(t *testing.T) {
	d, ctx := sharedDriver(t)
	keys := []string{"a", "b", "c"}
	gs, err := d.TryAcquireMulti(ctx, multiReqs(keys...))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.conn.Delete(gs[1].State.(*hold).path, -1); err != nil {
		t.Fatal(err)
	}
	ls := make([]driver.Lease, len(gs))
	for i, g := range gs {
		ls[i] = driver.Lease{Key: keys[i], State: g.State}
	}
	errs, err := d.ReleaseMulti(ctx, ls)
	if err != nil || errs[0] != nil || !errors.Is(errs[1], driver.ErrNotHeld) || errs[2] != nil {
		t.Fatalf("ReleaseMulti = %v, %v; want ErrNotHeld for b only", errs, err)
	}
	for _, k := range keys {
		if n := lockNodes(t, d, k); len(n) != 0 {
			t.Errorf("%s: lock nodes %v after ReleaseMulti", k, n)
		}
	}
}

// replyDropper is a TCP proxy to a ZooKeeper server that, once drop is
// set, forwards requests and drops the replies of the connection it
// serves; a new connection clears drop.
type replyDropper struct {
	ln   net.Listener
	drop atomic.Bool
	wg   sync.WaitGroup
	mu   sync.Mutex
	open []net.Conn
}

func newReplyDropper(t *testing.T, server string) *replyDropper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				continue
			}
			p.drop.Store(false)
			p.mu.Lock()
			p.open = append(p.open, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(s, c); s.Close() })
			p.wg.Go(func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && !p.drop.Load() {
						if _, err := c.Write(buf[:n]); err != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.open {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// TestMultiLostReplyUndone: a multi-operation applied whose reply is lost
// with the connection leaves no lock node once the session answers again.
func TestMultiLostReplyUndone(t *testing.T) {
	p := newReplyDropper(t, storeenv.ZooKeeper(t).Addrs()[0])
	conn, _, err := zk.Connect([]string{p.ln.Addr().String()}, sharedTTL, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	d := newDriver(conn, nil, "/locker-lost-"+rand.Text()[:10], Config{}.nodeACL())
	if err := d.Configure(t.Context(), driver.Config{TTL: sharedTTL}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		touchKey(ctx, t, d, k)
	}
	before, session := keyStat(t, d, "a").Version, conn.SessionID()
	d.hooks.beforeMulti = func() { p.drop.Store(true) }
	gs, err := d.TryAcquireMulti(ctx, multiReqs(keys...))
	if err == nil || errors.Is(err, driver.ErrHeld) {
		t.Fatalf("TryAcquireMulti whose reply was lost = %v, %v; want a connection error", gs, err)
	}
	if !eventually(ctx, func() bool {
		st := keyStat(t, d, "a")
		return st != nil && st.Version > before
	}) {
		t.Fatal("the multi-operation was never applied: the test proves nothing")
	}
	for _, k := range keys {
		if !eventually(ctx, func() bool { return len(lockNodes(t, d, k)) == 0 }) {
			t.Errorf("%s: lock nodes %v left by a multi-operation whose reply was lost", k, lockNodes(t, d, k))
		}
	}
	if conn.SessionID() != session {
		t.Fatalf("the session changed (%#x, was %#x): its nodes went with it, and the test proves nothing", conn.SessionID(), session)
	}
}

// TestMultiVoidLimitRecord: a limit record left with no lock node holds up
// no multi-key take, which deletes it.
func TestMultiVoidLimitRecord(t *testing.T) {
	ds, conns, ctx := limitDrivers(t, 3)
	staleRecord(ctx, t, ds, conns)
	multiTakeRelease(ctx, t, ds[2], "k", "x")
	if !eventually(ctx, func() bool { return len(records(t, ds[2])) == 0 }) {
		t.Errorf("a void limit record is still there: %+v", records(t, ds[2]))
	}
}

// TestRecallBounds: a Locker recalls a freed key only within the
// validity, and makes room among the keys it remembers by forgetting
// those past it.
func TestRecallBounds(t *testing.T) {
	d := newDriver(nil, nil, "/r", Config{}.nodeACL())
	d.validity.Store(int64(time.Second))
	old := time.Now().Add(-2 * time.Second)
	keys := []multiKey{{parent: "/r/a"}}
	d.free = map[string]keyVersion{"/r/a": {version: 1, czxid: 7, at: old}}
	if d.recall(keys) {
		t.Error("recalled a key freed longer ago than the validity")
	}
	d.free["/r/a"] = keyVersion{version: 1, czxid: 7, at: time.Now()}
	if !d.recall(keys) || keys[0].version != 1 || keys[0].czxid != 7 || len(d.free) != 0 {
		t.Errorf("recall of a key freed just now: keys %+v, left %v", keys, d.free)
	}
	for i := range maxFreed {
		d.free[fmt.Sprint(i)] = keyVersion{at: old}
	}
	d.remember("/r/a", keyVersion{version: 2, czxid: 7, at: time.Now()})
	if kv, ok := d.free["/r/a"]; !ok || kv.version != 2 || len(d.free) != 1 {
		t.Errorf("remember with %d keys past the validity remembered: %d keys, /r/a %+v", maxFreed, len(d.free), kv)
	}
}
