package etcd_test

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/internal/etcdserver"
	"github.com/golocker/locker/internal/storeenv"
	"github.com/golocker/locker/internal/testenv"
)

// testTTL is the TTL of the conformance Lockers: etcd's default minimum
// lease TTL, and room for the race detector on a busy machine.
const testTTL = 2 * time.Second

// testPrefix keeps the tests' keys together on a shared etcd.
const testPrefix = "locker-test/"

// fleet builds Lockers on one etcd for a harness: each Locker has its own
// client, dialling through its own proxies, so that it can crash or be cut
// off alone.
type fleet struct {
	eps   []string
	admin *clientv3.Client
	ttl   time.Duration

	mu      sync.Mutex
	clients map[locker.Locker]*clientv3.Client
	proxies map[locker.Locker][]*testenv.Proxy
}

func newFleet(t testing.TB, eps []string, ttl time.Duration) *fleet {
	return &fleet{
		eps:     eps,
		admin:   newClient(t, eps),
		ttl:     ttl,
		clients: map[locker.Locker]*clientv3.Client{},
		proxies: map[locker.Locker][]*testenv.Proxy{},
	}
}

// newLocker is Harness.NewLocker.
func (f *fleet) newLocker(t testing.TB) locker.Locker {
	t.Helper()
	var proxies []*testenv.Proxy
	var eps []string
	for _, ep := range f.eps {
		p := testenv.NewProxy(t, hostOf(ep))
		proxies = append(proxies, p)
		eps = append(eps, p.Addr())
	}
	cli, err := clientv3.New(clientConfig(eps))
	if err != nil {
		t.Errorf("etcd client: %v", err)
		return nil
	}
	t.Cleanup(func() { cli.Close() })
	l, err := etcd.New(cli, locker.WithTTL(f.ttl), locker.WithPrefix(testPrefix))
	if err != nil {
		t.Errorf("etcd.New: %v", err)
		return nil
	}
	f.mu.Lock()
	f.clients[l] = cli
	f.proxies[l] = proxies
	f.mu.Unlock()
	return l
}

// newLockerWith is the harness's NewLockerWith.
func (f *fleet) newLockerWith(t testing.TB, opts ...locker.Option) (locker.Locker, error) {
	cli, err := clientv3.New(clientConfig(f.eps))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cli.Close() })
	return etcd.New(cli, append([]locker.Option{locker.WithTTL(f.ttl), locker.WithPrefix(testPrefix)}, opts...)...)
}

func (f *fleet) harness() conformance.Harness {
	return conformance.Harness{
		NewLocker:     f.newLocker,
		NewLockerWith: f.newLockerWith,
		TTL:           f.ttl,
		// A crashed process: its client closes, nothing is released, the
		// lease expires.
		Crash: func(t testing.TB, l locker.Locker) {
			f.mu.Lock()
			cli := f.clients[l]
			f.mu.Unlock()
			cli.Close()
		},
		Isolate: func(t testing.TB, l locker.Locker) func() {
			f.mu.Lock()
			ps := f.proxies[l]
			f.mu.Unlock()
			for _, p := range ps {
				p.Cut()
			}
			return func() {
				for _, p := range ps {
					p.Heal()
				}
			}
		},
		DeleteBehind: func(t testing.TB, key string) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := f.admin.Delete(ctx, etcd.Dir(testPrefix+key), clientv3.WithPrefix()); err != nil {
				t.Errorf("delete behind: %v", err)
			}
		},
		MaxKeyBytes: etcd.MaxKeyBytes - len(testPrefix),
	}
}

// TestConformance runs the shared suite against an embedded etcd started for
// it (restarted by its Restart hook), and against LOCKER_ETCD_ENDPOINTS when
// the user set it (not when withstores did).
func TestConformance(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		srv := startEtcd(t, etcdserver.Config{})
		h := newFleet(t, srv.Endpoints(), testTTL).harness()
		h.Restart = func(t testing.TB) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := srv.Restart(ctx); err != nil {
				t.Errorf("restart etcd: %v", err)
			}
		}
		conformance.Run(t, h)
	})
	t.Run("env", func(t *testing.T) {
		if storeenv.StartedByWithstores(testenv.EnvEtcdEndpoints) {
			// A server like embedded's, started by make test for the
			// etcd module's own tests: nothing new to learn from it.
			return
		}
		eps := envEtcd(t)
		conformance.Run(t, newFleet(t, eps, testTTL).harness())
	})
}
