package redis_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestConformanceOpen runs the suite on Lockers that own their client
// (redis.Open): their calls whose ctx can end run on connections the
// Locker cuts when the ctx ends, made inline by the engine. Every Locker
// dials through a proxy of its own; Crash cuts it for good.
func TestConformanceOpen(t *testing.T) {
	srv := testenv.NewRedis(t)
	admin := newClient(t, srv.Addr())
	open := func(t testing.TB, addr string, opts ...locker.Option) (locker.Locker, error) {
		u := &url.URL{Scheme: "redis", Host: addr, RawQuery: "read_timeout=1s&write_timeout=1s&dial_timeout=1s&protocol=3"}
		return redis.Open(t.Context(), u, append([]locker.Option{locker.WithTTL(testTTL)}, opts...)...)
	}
	var reps replicas
	conformance.Run(t, conformance.Harness{
		TTL: testTTL,
		NewLocker: func(t testing.TB) locker.Locker {
			p := testenv.NewProxy(t, srv.Addr())
			l, err := open(t, p.Addr())
			if err != nil {
				t.Errorf("Open: %v", err)
				return nil
			}
			reps.add(l, replica{client: cutFor{p}, proxies: []*testenv.Proxy{p}})
			return l
		},
		NewLockerWith: func(t testing.TB, opts ...locker.Option) (locker.Locker, error) {
			return open(t, srv.Addr(), opts...)
		},
		Crash:   reps.crash,
		Isolate: reps.isolate,
		DeleteBehind: func(t testing.TB, key string) {
			if err := admin.Del(context.Background(), redis.KeysOf(key).Lock).Err(); err != nil {
				t.Errorf("DEL %s: %v", redis.KeysOf(key).Lock, err)
			}
		},
		Restart:     srv.Restart,
		MaxKeyBytes: redis.MaxKeyBytes,
		MultiAtomic: true, // one script on one server
	})
}

// cutFor is the Crash of a Locker that owns its client: its proxy drops
// everything from then on.
type cutFor struct{ p *testenv.Proxy }

func (c cutFor) Close() error {
	c.p.Cut()
	return nil
}
