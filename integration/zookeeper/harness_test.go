package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// testTTL is the TTL of the test Lockers and the session timeout of their
// connections: the server's tick is 200 ms, so sessions may be this short,
// and crash and isolation cases take a few seconds. At 2 s, Scale lost
// locks to starved renewals when make test ran beside other work; the
// package is not make test's longest, so the longer TTL costs no wall time.
const testTTL = 3 * time.Second

// quietLogger drops go-zookeeper's log lines: they would go to stderr, or,
// through t.Logf, panic when a connection logs after its test ended.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// connect opens a connection to addr with the test session timeout, closed
// when the test ends.
func connect(tb testing.TB, addr string) (*zk.Conn, <-chan zk.Event) {
	tb.Helper()
	conn, events, err := zk.Connect([]string{addr}, testTTL, zk.WithLogger(quietLogger{}), zk.WithLogInfo(false))
	if err != nil {
		tb.Fatalf("zk.Connect(%s): %v", addr, err)
	}
	tb.Cleanup(conn.Close)
	return conn, events
}

// waitSession waits until conn has a session.
func waitSession(tb testing.TB, conn *zk.Conn) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for conn.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			tb.Fatalf("no ZooKeeper session after 15 s (state %v)", conn.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// env is a ZooKeeper server with an admin connection, and the Lockers made
// on it, each with a connection of its own through a proxy of its own.
type env struct {
	srv   *testenv.ZooKeeperServer
	admin *zk.Conn

	mu      sync.Mutex
	proxies map[locker.Locker]*testenv.Proxy
	conns   map[locker.Locker]*zk.Conn
}

func newEnv(tb testing.TB, srv *testenv.ZooKeeperServer) *env {
	tb.Helper()
	admin, _ := connect(tb, srv.Servers()[0])
	return &env{
		srv:     srv,
		admin:   admin,
		proxies: map[locker.Locker]*testenv.Proxy{},
		conns:   map[locker.Locker]*zk.Conn{},
	}
}

// newLocker returns a Locker with the test TTL on a connection of its own
// through a proxy of its own. It reports failures with tb.Error, as harness
// hooks must.
func (e *env) newLocker(tb testing.TB, opts ...locker.Option) locker.Locker {
	tb.Helper()
	p := testenv.NewProxy(tb, e.srv.Servers()[0])
	conn, events := connect(tb, p.Addr())
	l, err := zookeeper.New(conn, events, append([]locker.Option{locker.WithTTL(testTTL)}, opts...)...)
	if err != nil {
		tb.Errorf("zookeeper.New: %v", err)
		return nil
	}
	e.mu.Lock()
	e.proxies[l] = p
	e.conns[l] = conn
	e.mu.Unlock()
	return l
}

// mustLocker is newLocker for tests, closing the Locker when the test ends.
func (e *env) mustLocker(t testing.TB, opts ...locker.Option) locker.Locker {
	t.Helper()
	l := e.newLocker(t, opts...)
	if l == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func (e *env) proxy(l locker.Locker) *testenv.Proxy {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proxies[l]
}

func (e *env) conn(l locker.Locker) *zk.Conn {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.conns[l]
}

// children lists the lock queue of key (default root, no prefix).
func (e *env) children(tb testing.TB, key string) []string {
	tb.Helper()
	c, _, err := e.admin.Children(zookeeper.QueuePath(zookeeper.DefaultRoot, key))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		tb.Fatalf("list the queue of %q: %v", key, err)
	}
	return c
}

// awaitQueued waits until key's queue holds at least n nodes while
// holder holds key, failing the test with what when ctx ends first: a
// waiter that returned at once (its session expired on a loaded machine,
// say) never queues. It returns holder's loss when no renewal came back
// in time (rerun.StarvedLoss: the holder's node goes, and the queue may
// never grow), and fails tb when holder was lost otherwise.
func (e *env) awaitQueued(ctx context.Context, tb testing.TB, key string, n int, what string, holder locker.Lock) error {
	tb.Helper()
	for len(e.children(tb, key)) < n {
		if lost := holder.Err(); lost != nil {
			if starved := starvedLoss(holder); starved != nil {
				return starved
			}
			tb.Fatalf("%s: the holder lost its lock: %v", what, lost)
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("%s: key %q's queue holds %d nodes, want %d: %v", what, key, len(e.children(tb, key)), n, context.Cause(ctx))
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// deleteBehind deletes every node of key's queue.
func (e *env) deleteBehind(tb testing.TB, key string) {
	tb.Helper()
	parent := zookeeper.QueuePath(zookeeper.DefaultRoot, key)
	children, _, err := e.admin.Children(parent)
	if err != nil {
		tb.Errorf("list %s: %v", parent, err)
		return
	}
	for _, c := range children {
		if err := e.admin.Delete(parent+"/"+c, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			tb.Errorf("delete %s/%s: %v", parent, c, err)
		}
	}
}

func (e *env) harness() conformance.Harness {
	return conformance.Harness{
		TTL:       testTTL,
		NewLocker: func(tb testing.TB) locker.Locker { return e.newLocker(tb) },
		NewLockerWith: func(tb testing.TB, opts ...locker.Option) (locker.Locker, error) {
			conn, events := connect(tb, e.srv.Servers()[0])
			return zookeeper.New(conn, events, append([]locker.Option{locker.WithTTL(testTTL)}, opts...)...)
		},
		// A crashed process stops talking: its connection goes silent (no
		// close, which would end the session at once) and the session
		// expires after the session timeout.
		Crash: func(tb testing.TB, l locker.Locker) {
			if p := e.proxy(l); p != nil {
				p.Cut()
			} else {
				tb.Errorf("Crash: not a Locker of this harness")
			}
		},
		Isolate: func(tb testing.TB, l locker.Locker) func() {
			p := e.proxy(l)
			if p == nil {
				tb.Errorf("Isolate: not a Locker of this harness")
				return nil
			}
			p.Cut()
			return p.Heal
		},
		DeleteBehind: e.deleteBehind,
		Restart: func(tb testing.TB) {
			e.srv.Restart(tb)
		},
		MaxKeyBytes: zookeeper.MaxKeyBytes,
		MultiAtomic: true,
	}
}

// uniqueKey returns a key no other test or run uses.
func uniqueKey(tb testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(tb.Name())
	return fmt.Sprintf("%s-%012x", name, rand.Uint64()&(1<<48-1))
}

// testCtx returns a context that ends after d or with the test.
func testCtx(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(tb.Context(), d)
	tb.Cleanup(cancel)
	return ctx
}

// TestConformance runs the shared suite on a server of its own, which the
// Restart case restarts.
func TestConformance(t *testing.T) {
	e := newEnv(t, testenv.NewZooKeeper(t))
	conformance.Run(t, e.harness())
}

// BenchmarkConformance runs the shared benchmarks (LockUnlock, TryLockHeld,
// Handoff, ParallelDistinctKeys) without proxies.
func BenchmarkConformance(b *testing.B) {
	srv := testenv.ZooKeeper(b)
	conformance.RunBenchmarks(b, conformance.Harness{
		TTL: testTTL,
		NewLocker: func(tb testing.TB) locker.Locker {
			conn, events := connect(tb, srv.Servers()[0])
			l, err := zookeeper.New(conn, events, locker.WithTTL(testTTL))
			if err != nil {
				tb.Errorf("zookeeper.New: %v", err)
				return nil
			}
			return l
		},
	})
}
