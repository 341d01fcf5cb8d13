package zookeeper_test

import (
	"context"
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
// server (a JVM tuned to start fast, 200 ms ticks): this library beside
// go-zookeeper's zk.Lock (the recipe every ZooKeeper lock builds on, so also
// the floor), each client on a session of its own:
//
//	go test -run '^$' -bench Scenarios ./integration/zookeeper/
func BenchmarkScenarios(b *testing.B) {
	srv := testenv.ZooKeeper(b)
	addr := srv.Servers()[0]
	newLocker := func(b *testing.B) locker.Locker { return benchLocker(b, addr) }
	contend.Scenarios(b, scenarioImpls(b, srv, newLocker, testTTL), 3*time.Second)
}

// BenchmarkScenariosProduction is BenchmarkScenarios on a server run as in
// production (the stock JVM, 2 s ticks; see testenv.ZooKeeperProduction),
// each client of this library a Locker opened as users open one: through
// the zk:// URL, with a TTL of productionTTL. The zk.Lock clients connect
// with the same session timeout. Its metrics have the same names as
// BenchmarkScenarios', "locker-x-zklock" among them, per scenario and
// client count.
func BenchmarkScenariosProduction(b *testing.B) {
	srv := testenv.ZooKeeperProduction(b)
	var mux locker.Mux
	if err := mux.Register("zk", zookeeper.Open); err != nil {
		b.Fatal(err)
	}
	url := "zk://" + srv.Servers()[0] + zookeeper.DefaultRoot
	newLocker := func(b *testing.B) locker.Locker {
		l, err := locker.Open(b.Context(), &mux, url, locker.WithTTL(productionTTL))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	contend.Scenarios(b, scenarioImpls(b, srv, newLocker, productionTTL), 3*time.Second)
}

// scenarioImpls is this library (a Locker of its own per client, from
// newLocker) and zk.Lock (a connection of its own per client, with session
// timeout ttl) on srv, with the server's CPU time when it can tell.
func scenarioImpls(b *testing.B, srv *testenv.ZooKeeperServer, newLocker func(*testing.B) locker.Locker, ttl time.Duration) []contend.Impl {
	impls := []contend.Impl{
		contend.Locker(newLocker),
		{Name: "zklock", New: func(b *testing.B, key string) contend.Mutex {
			conn, _ := connectWith(b, srv, ttl)
			path := "/zklock-scenarios/" + key
			acl := zk.WorldACL(zk.PermAll)
			return contend.Func(func(context.Context) (func(context.Context) error, error) {
				lk := zk.NewLock(conn, path, acl)
				if err := lk.Lock(); err != nil {
					return nil, err
				}
				return func(context.Context) error { return lk.Unlock() }, nil
			})
		}},
	}
	if _, err := srv.CPU(); err == nil {
		for i := range impls {
			impls[i].ServerCPU = func(context.Context) (time.Duration, error) { return srv.CPU() }
		}
	}
	return impls
}
