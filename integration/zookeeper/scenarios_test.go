package zookeeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
)

// BenchmarkScenarios runs the scenarios of package contend on one ZooKeeper
// server: this library beside go-zookeeper's zk.Lock (the recipe every
// ZooKeeper lock builds on, so also the floor), each client on a session of
// its own:
//
//	go test -run '^$' -bench Scenarios ./integration/zookeeper/
func BenchmarkScenarios(b *testing.B) {
	addr := testenv.ZooKeeper(b).Servers()[0]
	impls := []contend.Impl{
		contend.Locker(func(b *testing.B) locker.Locker { return benchLocker(b, addr) }),
		{Name: "zklock", New: func(b *testing.B, key string) contend.Mutex {
			conn, _ := benchConn(b, addr)
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
	contend.Scenarios(b, impls, 3*time.Second)
}
