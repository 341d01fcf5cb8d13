package zookeeper_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/memory"
	"github.com/golocker/locker/zookeeper"
)

func TestNewValidates(t *testing.T) {
	if _, err := zookeeper.New(nil, nil); !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "zk.Conn") {
		t.Errorf("New(nil conn) = %v, want an error matching ErrInvalidOption naming *zk.Conn", err)
	}
	srv := testenv.ZooKeeper(t)
	conn, _ := connect(t, srv.Servers()[0])
	for _, root := range []string{"locker", "/", "/a/", "/a//b", "/a/./b", "/zookeeper", "/zookeeper/locks", "/a%b", "/a\x00b", "/🔒"} {
		l, err := zookeeper.Config{Root: root}.New(conn, nil)
		if !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("Config{Root: %q}.New = %v, want an error matching ErrInvalidOption", root, err)
		}
		if l != nil {
			_ = l.Close()
		}
	}
	if _, err := zookeeper.New(conn, nil, locker.WithTTL(time.Millisecond)); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("New with a TTL below the minimum = %v, want ErrInvalidOption", err)
	}
}

func TestConfigRootAndACL(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	conn, events := connect(t, e.srv.Servers()[0])
	root := "/locker-test/" + uniqueKey(t) + "/locks"
	if err := e.admin.AddAuth("digest", []byte("admin:secret")); err != nil {
		t.Fatal(err)
	}
	if err := conn.AddAuth("digest", []byte("app:secret")); err != nil {
		t.Fatal(err)
	}
	acl := zk.DigestACL(zk.PermAll, "app", "secret")
	l, err := zookeeper.Config{Root: root, ACL: acl}.New(conn, events, locker.WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := testCtx(t, 30*time.Second)
	lk, err := l.TryLock(ctx, "k/1")
	if err != nil {
		t.Fatalf("TryLock under a custom root and ACL: %v", err)
	}
	check, err := zookeeper.Guard(lk)
	if err != nil {
		t.Fatal(err)
	}
	if want := zookeeper.QueuePath(root, "k/1") + "/"; !strings.HasPrefix(check.Path, want) {
		t.Errorf("lock node %s, want it under %s", check.Path, want)
	}
	for _, p := range []string{root, zookeeper.QueuePath(root, "k/1"), check.Path} {
		got, _, err := conn.GetACL(p)
		if err != nil {
			t.Fatalf("GetACL(%s): %v", p, err)
		}
		if len(got) != 1 || got[0] != acl[0] {
			t.Errorf("ACL of %s = %v, want %v", p, got, acl)
		}
	}
	// Another identity may neither read nor delete the node.
	if _, _, err := e.admin.Get(check.Path); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Get of the lock node by another identity: %v, want zk.ErrNoAuth", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Lock whose ctx ends while it waits deletes its node: 50 cancelled waits,
// in a row and concurrently, leave nothing but the holder's node.
func TestCancelledWaitsLeaveNoNode(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, time.Minute)
	key := uniqueKey(t)
	holder := e.mustLocker(t)
	la, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b := e.mustLocker(t)
	for i := range 25 {
		// Deadlines of 0 to 4 ms end some waits while the create is in
		// flight, the others while the node waits for its turn.
		wctx, cancel := context.WithTimeout(ctx, time.Duration(i%5)*time.Millisecond)
		_, err := b.Lock(wctx, key)
		cancel()
		if !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock %d on a held key with a short deadline: %v", i, err)
		}
	}
	errs := make(chan error, 25)
	for i := range 25 {
		l := b
		if i%5 != 0 {
			l = e.mustLocker(t)
		}
		go func() {
			wctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(time.Duration(i)*time.Millisecond, cancel)
			_, err := l.Lock(wctx, key)
			cancel()
			errs <- err
		}()
	}
	for range 25 {
		if err := <-errs; !errors.Is(err, locker.ErrNotAcquired) {
			t.Errorf("a cancelled Lock on a held key: %v", err)
		}
	}
	check, err := zookeeper.Guard(la)
	if err != nil {
		t.Fatal(err)
	}
	// A cancelled Lock returns at once; its node goes in the background,
	// promptly.
	for start := time.Now(); ; {
		got := e.children(t, key)
		if len(got) == 1 && strings.HasSuffix(check.Path, "/"+got[0]) {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("5s after 50 cancelled waits the queue holds %v, want only the holder's node %s", got, check.Path)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.children(t, key); len(got) != 0 {
		t.Errorf("after Unlock the queue holds %v, want nothing", got)
	}
}

// A refused TryLock deletes its node.
func TestTryLockHeldLeavesNoNode(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, time.Minute)
	key := uniqueKey(t)
	a, b := e.mustLocker(t), e.mustLocker(t)
	la, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := b.TryLock(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("TryLock on a held key: %v", err)
		}
	}
	if got := e.children(t, key); len(got) != 1 {
		t.Errorf("after 20 refused TryLocks the queue holds %v, want only the holder's node", got)
	}
	_ = la.Unlock(ctx)
}

// A Lock whose ctx ends while its create is held up in the network deletes
// the node once the create's reply comes.
func TestCancelledCreateInFlight(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, time.Minute)
	key := uniqueKey(t)
	a := e.mustLocker(t)
	waitSession(t, e.conn(a))
	p := e.proxy(a)
	p.Cut()
	time.AfterFunc(300*time.Millisecond, p.Heal)
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := a.Lock(wctx, key)
	cancel()
	if !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock whose deadline passed during a network cut: %v", err)
	}
	// Deleted at once when the reply came within the cleanup timeout, by
	// the janitor otherwise.
	for deadline := time.Now().Add(15 * time.Second); len(e.children(t, key)) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the node of a Lock cancelled during its create is still there: %v", e.children(t, key))
		}
		time.Sleep(20 * time.Millisecond)
	}
	lk, err := e.mustLocker(t).TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after the cancelled Lock cleaned up: %v", err)
	}
	_ = lk.Unlock(ctx)
}

// Waiters are served in arrival order, and each watches only the node just
// before its own and the one before that: no watch on the queue itself, one
// per node but the last, one more per node but the last two from the waiter
// two behind it, and the holder's own.
func TestFIFOAndPredecessorWatches(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, time.Minute)
	key := uniqueKey(t)
	la, err := e.mustLocker(t).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	order := make(chan int, waiters)
	errs := make(chan error, waiters)
	for i := range waiters {
		l := e.mustLocker(t)
		go func() {
			lk, err := l.Lock(ctx, key)
			if err != nil {
				errs <- err
				return
			}
			order <- i
			errs <- lk.Unlock(ctx)
		}()
		// The next waiter starts once this one is in the queue.
		for len(e.children(t, key)) < i+2 {
			select {
			case err := <-errs:
				t.Fatalf("waiter %d ended before joining the queue: %v", i, err)
			case <-ctx.Done():
				t.Fatalf("waiter %d not in the queue: %v", i, context.Cause(ctx))
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	// Give the last waiters time to set their watches.
	parent := zookeeper.QueuePath(zookeeper.DefaultRoot, key)
	queue := sortedQueue(t, e, key)
	want := map[string]int{}
	for _, n := range queue[:waiters] { // every node but the last is watched by its successor
		want[parent+"/"+n] = 1
	}
	for _, n := range queue[:waiters-1] { // and by the waiter two behind it
		want[parent+"/"+n]++
	}
	want[parent+"/"+queue[0]]++ // and by its holder
	for deadline := time.Now().Add(5 * time.Second); ; {
		watched, err := watchesByPath(e.srv.Servers()[0], parent)
		if err != nil {
			t.Logf("cannot read the server's watches, skipping that check: %v", err)
			break
		}
		if mapsEqual(watched, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("watches under %s = %v, want one on each node but the last, one more on each but the last two, one more on the holder's (%v): each waiter watches only the node before its own and the one before that", parent, watched, want)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range waiters {
		if err := <-errs; err != nil {
			t.Fatalf("waiter: %v", err)
		}
		if got := <-order; got != want {
			t.Errorf("waiter %d got the lock in turn %d: waiters must be served in arrival order", got, want)
		}
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// watchesByPath asks the server (four-letter word wchp) how many sessions
// watch each path under prefix.
func watchesByPath(addr, prefix string) (map[string]int, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "wchp"); err != nil {
		return nil, err
	}
	out := map[string]int{}
	path := ""
	sc := bufio.NewScanner(conn)
	lines := 0
	for sc.Scan() {
		line := sc.Text()
		lines++
		switch {
		case strings.Contains(line, "not executed") || strings.Contains(line, "not in the whitelist"):
			return nil, errors.New(line)
		case strings.HasPrefix(line, "/"):
			path = line
		case strings.HasPrefix(line, "\t0x") && strings.HasPrefix(path, prefix+"/"), path == prefix && strings.HasPrefix(line, "\t0x"):
			out[path]++
		}
	}
	if lines == 0 {
		return nil, errors.New("empty wchp answer")
	}
	return out, sc.Err()
}

// An expired session ends the lock before anyone else gets it; once the
// connection is back, a new session serves new locks.
func TestSessionExpiry(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, time.Minute)
	key := uniqueKey(t)
	a, b := e.mustLocker(t), e.mustLocker(t)
	la, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	session := e.conn(a).SessionID()
	p := e.proxy(a)
	p.Cut()
	var lb locker.Lock
	for lb == nil {
		lk, err := b.TryLock(ctx, key)
		switch {
		case err == nil:
			lb = lk
			select {
			case <-la.Done():
			default:
				t.Fatalf("another Locker got the key while the cut-off holder's Done was open")
			}
		case !errors.Is(err, locker.ErrNotAcquired) || ctx.Err() != nil:
			t.Fatalf("TryLock while the holder is cut off: %v (ctx: %v)", err, ctx.Err())
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !errors.Is(la.Err(), locker.ErrLost) {
		t.Errorf("Err of the expired lock = %v, want ErrLost", la.Err())
	}
	p.Heal()
	// The connection comes back, finds its session expired and gets a new
	// one, which serves new locks.
	key2 := uniqueKey(t)
	for {
		lk, err := a.TryLock(ctx, key2)
		if err == nil {
			_ = lk.Unlock(ctx)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a Locker whose session expired must serve new locks once reconnected: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := e.conn(a).SessionID(); s == session {
		t.Errorf("the session %#x survived a cut of twice its timeout", s)
	}
	if err := la.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Unlock of the expired lock: %v, want ErrNotHeld", err)
	}
	if got := e.children(t, key); len(got) != 1 {
		t.Errorf("queue %v, want only the new holder's node", got)
	}
	_ = lb.Unlock(ctx)
}

// Closing the connection ends its locks at once, through the events channel.
func TestConnCloseEndsLocks(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, time.Minute)
	key := uniqueKey(t)
	a := e.mustLocker(t)
	la, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	e.conn(a).Close()
	select {
	case <-la.Done():
	case <-ctx.Done():
		t.Fatal("Done still open after the connection was closed")
	}
	if err := la.Err(); !errors.Is(err, locker.ErrLost) || !errors.Is(err, zookeeper.ErrConnClosed) {
		t.Errorf("Err = %v, want ErrLost caused by the closed connection (not by the renewal deadline)", err)
	}
	lk, err := e.mustLocker(t).Lock(ctx, key)
	if err != nil {
		t.Fatalf("Lock after the holder's connection closed: %v", err)
	}
	_ = lk.Unlock(ctx)
}

// A lock whose renewals fail while the session lives on (here: the holder
// may no longer read its node) is lost locally at the deadline, and its node
// is then deleted, so that it does not block the key for as long as the
// session lives.
func TestGivenUpLockIsDeleted(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	e := newEnv(t, srv)
	ctx := testCtx(t, time.Minute)
	key := uniqueKey(t)
	// The default ACL gives nobody ADMIN: this Locker's operator chose an
	// ACL that lets the test re-ACL the node.
	conn, events := connectWith(t, srv, testTTL)
	a, err := zookeeper.Config{ACL: zk.WorldACL(zk.PermAll)}.New(conn, events, locker.WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := e.mustLocker(t)
	la, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	check, err := zookeeper.Guard(la)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.SetACL(check.Path, zk.WorldACL(zk.PermDelete|zk.PermAdmin), -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	case <-ctx.Done():
		t.Fatal("Done still open although no renewal succeeds")
	}
	if !errors.Is(la.Err(), locker.ErrLost) {
		t.Errorf("Err = %v, want ErrLost", la.Err())
	}
	// Polling: ZooKeeper sends no watch events of a node the watcher may
	// not read.
	var lb locker.Lock
	for lb == nil {
		lb, err = b.TryLock(ctx, key)
		if err != nil && (ctx.Err() != nil || !errors.Is(err, locker.ErrNotAcquired)) {
			t.Fatalf("the node of a lock its holder gave up on must be deleted: TryLock: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if conn.State() != zk.StateHasSession {
		t.Errorf("the holder's session should still be up: state %v", conn.State())
	}
	_ = lb.Unlock(ctx)
}

func TestGuard(t *testing.T) {
	e := newEnv(t, testenv.ZooKeeper(t))
	ctx := testCtx(t, time.Minute)
	key := uniqueKey(t)
	a := e.mustLocker(t)
	conn := e.conn(a)
	data := "/guarded-" + key
	if _, err := conn.Create(data, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	err := locker.Do(ctx, a, key, func(ctx context.Context) error {
		lk, err := a.Lock(ctx, key) // nested: the outer lock's guard
		if err != nil {
			return err
		}
		check, err := zookeeper.Guard(lk)
		if err != nil {
			return fmt.Errorf("Guard of a zookeeper lock: %w", err)
		}
		if _, err := conn.Multi(check, &zk.SetDataRequest{Path: data, Data: []byte("1"), Version: -1}); err != nil {
			t.Errorf("a guarded write while the lock is held: %v", err)
		}
		e.deleteBehind(t, key)
		if _, err := conn.Multi(check, &zk.SetDataRequest{Path: data, Data: []byte("2"), Version: -1}); !errors.Is(err, zk.ErrNoNode) {
			t.Errorf("a guarded write after the lock node was deleted: %v, want zk.ErrNoNode", err)
		}
		return nil
	})
	if !errors.Is(err, locker.ErrLost) {
		t.Errorf("Do = %v, want ErrLost", err)
	}
	if got, _, _ := conn.Get(data); string(got) != "1" {
		t.Errorf("data = %q, want only the guarded write made under the lock", got)
	}
	ml, _ := memory.New(memory.NewStore())
	defer ml.Close()
	mk, _ := ml.TryLock(ctx, "k")
	if _, err := zookeeper.Guard(mk); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("Guard of a memory lock = %v, want ErrInvalidOption", err)
	}
	if _, err := zookeeper.Guard(nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("Guard(nil) = %v, want ErrInvalidOption", err)
	}
}
