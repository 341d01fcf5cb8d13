package redis_test

import (
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
	t.Parallel() // a server of its own: see TestMain
	h := singleHarnessOf(t, testenv.NewRedis(t), func(t testing.TB, addr string, opts ...locker.Option) (locker.Locker, closer, error) {
		u := &url.URL{Scheme: "redis", Host: addr, RawQuery: "read_timeout=1s&write_timeout=1s&dial_timeout=1s&protocol=3"}
		l, err := redis.Open(t.Context(), u, opts...)
		return l, nil, err
	})
	h.Busy = nil // the Locker owns its client: its caller has none to fill
	conformance.Run(t, h)
}

// TestConformanceOwnClient runs the suite on Lockers made with
// redis.Config.OwnClient on a client of their caller: their calls run on a
// client of their own, made from the caller's options, as on a Locker from
// Open. Every caller's client dials through a proxy of its own, and so does
// the Locker's copy: Crash cuts it for good (closing the caller's client
// alone would not end the Locker's connections). Busy fills the caller's
// pools: the Locker must work beside them, since it no longer shares them.
func TestConformanceOwnClient(t *testing.T) {
	t.Parallel() // a server of its own: see TestMain
	conformance.Run(t, singleHarnessWith(t, testenv.NewRedis(t), redis.Config{OwnClient: true}, nil))
}
