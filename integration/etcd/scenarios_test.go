package etcd_test

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/contend"
)

// BenchmarkScenarios runs the scenarios of package contend on the embedded
// etcd (or LOCKER_ETCD_ENDPOINTS): this library beside etcd's own
// concurrency.Mutex (the peer and the floor: the recipe every etcd lock
// builds on), each client with a client and session of its own:
//
//	go test -run '^$' -bench Scenarios ./integration/etcd/
func BenchmarkScenarios(b *testing.B) {
	eps := benchEtcd(b)
	impls := []contend.Impl{
		contend.Locker(func(b *testing.B) locker.Locker { return benchLocker(b, newClient(b, eps)) }),
		{Name: "mutex", New: func(b *testing.B, key string) contend.Mutex {
			s := benchSession(b, newClient(b, eps))
			return contend.Func(func(ctx context.Context) (func(context.Context) error, error) {
				m := concurrency.NewMutex(s, "/mutex-scenarios/"+key)
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return m.Unlock, nil
			})
		}},
	}
	contend.Scenarios(b, impls, 3*time.Second)
}
