package zookeeper_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// productionTTL is the TTL, and so the session timeout, of the clients of
// BenchmarkScenariosProduction: within the session bounds of a server with
// the default tick (4 s to 40 s).
const productionTTL = 10 * time.Second

// BenchmarkScenarios runs the scenarios of package contend on the test
// server (a JVM tuned to start fast, 200 ms ticks), in paired windows
// (contend.ScenariosPaired; "locker-x-zklock" is the median of the pairs'
// ratios): this library beside
// go-zookeeper's zk.Lock (the recipe every ZooKeeper lock builds on, so also
// the floor), each client on a session of its own:
//
//	go test -run '^$' -bench Scenarios ./integration/zookeeper/
func BenchmarkScenarios(b *testing.B) {
	srv := testenv.ZooKeeper(b)
	addr := srv.Servers()[0]
	newLocker := func(b *testing.B) locker.Locker { return benchLocker(b, addr) }
	contend.ScenariosPaired(b, scenarioImpls(b, srv, newLocker, testTTL), 3*time.Second, scenarioPairs)
}

// scenarioPairs is how many pairs of windows BenchmarkScenarios and
// BenchmarkScenariosProduction cut a contended scenario's turns into
// (contend.ScenariosPaired): 300 ms windows, and a median of 10 pairs per
// ctx kind, over which a pause on one window (a GC, a session event, the
// JVM's JIT, a load burst from another process on the machine) moves one
// pair only.
const scenarioPairs = 10

// BenchmarkScenariosProduction is BenchmarkScenarios on a server run as in
// production (the stock JVM, 2 s ticks; see testenv.ZooKeeperProduction),
// each client of this library a Locker opened as users open one: through
// the zk:// URL, with a TTL of productionTTL. The zk.Lock clients connect
// with the same session timeout. Its metrics have the same names as
// BenchmarkScenarios', "locker-x-zklock" among them, per scenario and
// client count.
func BenchmarkScenariosProduction(b *testing.B) {
	srv := testenv.ZooKeeperProduction(b)
	impls := scenarioImpls(b, srv, urlLockers(b, srv, productionTTL), productionTTL)
	warmUp(b, impls, productionWarmUp)
	contend.ScenariosPaired(b, impls, 3*time.Second, scenarioPairs)
}

// urlLockers returns a function that opens a Locker on srv as users open
// one: through the zk:// URL, with a TTL of ttl.
func urlLockers(b *testing.B, srv *testenv.ZooKeeperServer, ttl time.Duration) func(*testing.B) locker.Locker {
	var mux locker.Mux
	if err := mux.Register("zk", zookeeper.Open); err != nil {
		b.Fatal(err)
	}
	url := "zk://" + srv.Servers()[0] + zookeeper.DefaultRoot
	return func(b *testing.B) locker.Locker {
		l, err := locker.Open(b.Context(), &mux, url, locker.WithTTL(ttl))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
}

// productionWarmUp is how long BenchmarkScenariosProduction has the
// implementations take turns before it measures: the stock JVM compiles
// the server's hot paths in its first seconds, and the CPU that takes
// would count against whichever implementation runs then.
const productionWarmUp = 8 * time.Second

// warmUp has 4 clients of each implementation take a key in turns, the
// implementations alternating every second, for d in all.
func warmUp(b *testing.B, impls []contend.Impl, d time.Duration) {
	b.Helper()
	ms := make([][]contend.Mutex, len(impls))
	for i, impl := range impls {
		key := contend.Keys(b, impl.Name, "warmup")
		for range 4 {
			ms[i] = append(ms[i], impl.New(b, key))
		}
	}
	ctx := b.Context()
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i, impl := range impls {
			stop := time.Now().Add(time.Second)
			var wg sync.WaitGroup
			for _, m := range ms[i] {
				wg.Go(func() {
					for time.Now().Before(stop) {
						unlock, err := m.Lock(ctx)
						if err != nil {
							b.Errorf("%s: warm-up lock: %v", impl.Name, err)
							return
						}
						if err := unlock(ctx); err != nil {
							b.Errorf("%s: warm-up unlock: %v", impl.Name, err)
							return
						}
					}
				})
			}
			wg.Wait()
			if b.Failed() {
				b.FailNow()
			}
		}
	}
}

// scenarioImpls is this library (a Locker of its own per client, from
// newLocker) and zk.Lock (a connection of its own per client, with session
// timeout ttl) on srv, with the server's CPU time when it can tell.
func scenarioImpls(b *testing.B, srv *testenv.ZooKeeperServer, newLocker func(*testing.B) locker.Locker, ttl time.Duration) []contend.Impl {
	impls := []contend.Impl{
		contend.Locker(newLocker),
		{Name: "zklock", New: func(b *testing.B, key string) contend.Mutex {
			conn, _ := connectWith(b, srv, ttl)
			return zkLockMutex(conn, "/zklock-scenarios/"+key)
		}},
	}
	if _, err := srv.CPU(); err == nil {
		for i := range impls {
			impls[i].ServerCPU = func(context.Context) (time.Duration, error) { return srv.CPU() }
		}
	}
	return impls
}

// zkLockMutex is a client of go-zookeeper's zk.Lock on conn: each Lock
// takes the lock at path with a zk.Lock of its own.
func zkLockMutex(conn *zk.Conn, path string) contend.Mutex {
	acl := zk.WorldACL(zk.PermAll)
	return contend.Func(func(context.Context) (func(context.Context) error, error) {
		lk := zk.NewLock(conn, path, acl)
		if err := lk.Lock(); err != nil {
			return nil, err
		}
		return func(context.Context) error { return lk.Unlock() }, nil
	})
}
