package redis_test

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/integration/internal/redistest"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// testTTL is the TTL of the conformance harnesses.
const testTTL = redistest.TTL

// closer is a go-redis client that can be closed (Crash).
type closer = redistest.Closer

// singleHarness is the conformance harness on one redis-server that the
// harness may restart: every Locker has its own client, dialling through its
// own proxy.
func singleHarness(t *testing.T, srv *testenv.RedisServer) conformance.Harness {
	return singleHarnessWith(t, srv, redis.Config{}, nil)
}

// singleHarnessWith is singleHarness with Lockers made by cfg on clients
// whose options login adjusts (nil: the default user).
func singleHarnessWith(t *testing.T, srv *testenv.RedisServer, cfg redis.Config, login func(*goredis.Options)) conformance.Harness {
	return singleHarnessOf(t, srv, func(t testing.TB, addr string, opts ...locker.Option) (locker.Locker, closer, error) {
		var c *goredis.Client
		if login == nil {
			c = newClient(t, addr)
		} else {
			o := clientOptions(addr)
			login(o)
			c = goredis.NewClient(o)
			t.Cleanup(func() { _ = c.Close() })
		}
		l, err := cfg.New(c, opts...)
		return l, c, err
	})
}

// singleHarnessOf is singleHarness with Lockers that mk makes on the
// server at addr (a proxy's for NewLocker) with opts, the TTL's first. It
// returns the client Crash closes; nil for a Locker that owns its client,
// whose Crash cuts its proxy for good.
func singleHarnessOf(t *testing.T, srv *testenv.RedisServer, mk func(t testing.TB, addr string, opts ...locker.Option) (locker.Locker, closer, error)) conformance.Harness {
	admin := newClient(t, srv.Addr())
	var reps redistest.Replicas
	return conformance.Harness{
		TTL: testTTL,
		NewLocker: func(t testing.TB) locker.Locker {
			p := testenv.NewProxy(t, srv.Addr())
			l, c, err := mk(t, p.Addr(), locker.WithTTL(testTTL))
			if err != nil {
				t.Errorf("New: %v", err)
				return nil
			}
			reps.Add(l, redistest.Replica{Client: c, Proxies: []*testenv.Proxy{p}})
			return l
		},
		NewLockerWith: func(t testing.TB, opts ...locker.Option) (locker.Locker, error) {
			l, _, err := mk(t, srv.Addr(), append([]locker.Option{locker.WithTTL(testTTL)}, opts...)...)
			return l, err
		},
		Crash:   reps.Crash,
		Isolate: reps.Isolate,
		DeleteBehind: func(t testing.TB, key string) {
			if err := admin.Del(context.Background(), redis.KeysOf(key).Lock).Err(); err != nil {
				t.Errorf("DEL %s: %v", redis.KeysOf(key).Lock, err)
			}
		},
		Busy:        reps.Busy(admin),
		Restart:     srv.Restart,
		MaxKeyBytes: redis.MaxKeyBytes,
		MultiAtomic: true, // one script on one server
	}
}

// clusterHarness is the conformance harness on a three-master Cluster: every
// Locker has its own cluster client whose connections to each node go
// through a proxy of its own.
func clusterHarness(t *testing.T, cl *testenv.RedisClusterServer) conformance.Harness {
	admin := newCluster(t, cl.Addrs(), nil)
	var reps redistest.Replicas
	return conformance.Harness{
		TTL: testTTL,
		NewLocker: func(t testing.TB) locker.Locker {
			dial, all := redistest.ProxiedDialer(t, cl.Addrs())
			c := newCluster(t, cl.Addrs(), dial)
			l, err := redis.New(c, locker.WithTTL(testTTL))
			if err != nil {
				t.Errorf("New: %v", err)
				return nil
			}
			reps.Add(l, redistest.Replica{Client: c, Proxies: all})
			return l
		},
		NewLockerWith: func(t testing.TB, opts ...locker.Option) (locker.Locker, error) {
			return redis.New(newCluster(t, cl.Addrs(), nil), append([]locker.Option{locker.WithTTL(testTTL)}, opts...)...)
		},
		Crash:   reps.Crash,
		Isolate: reps.Isolate,
		DeleteBehind: func(t testing.TB, key string) {
			if err := admin.Del(context.Background(), redis.KeysOf(key).Lock).Err(); err != nil {
				t.Errorf("DEL %s: %v", redis.KeysOf(key).Lock, err)
			}
		},
		Busy:        reps.Busy(admin),
		MaxKeyBytes: redis.MaxKeyBytes,
	}
}

func TestConformance(t *testing.T) {
	t.Parallel() // a server of its own: see TestMain
	conformance.Run(t, singleHarness(t, testenv.NewRedis(t)))
}

// TestConformanceUnfair runs the suite with Config.Unfair (barging).
func TestConformanceUnfair(t *testing.T) {
	t.Parallel() // a server of its own: see TestMain
	conformance.Run(t, singleHarnessWith(t, testenv.NewRedis(t), redis.Config{Unfair: true}, nil))
}

// TestConformanceCluster runs the suite on a Cluster of its own, which its
// Restart hook restarts.
func TestConformanceCluster(t *testing.T) {
	t.Parallel() // a server of its own: see TestMain
	cl := testenv.NewRedisCluster(t)
	h := clusterHarness(t, cl)
	h.Restart = cl.Restart
	conformance.Run(t, h)
}
