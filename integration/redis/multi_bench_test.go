package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"

	"github.com/golocker/locker"
	"github.com/golocker/locker/conformance"
	scen "github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// BenchmarkConformance runs the suite's benchmarks on one redis-server;
// LockMulti among them reports x-lock, a LockMulti of three uncontended
// keys over one Lock:
//
//	go test -run '^$' -bench 'Conformance/LockMulti' ./integration/redis/
func BenchmarkConformance(b *testing.B) {
	addr := testenv.Redis(b).Addr()
	conformance.RunBenchmarks(b, conformance.Harness{
		TTL: 10 * time.Second,
		NewLocker: func(t testing.TB) locker.Locker {
			l, err := redis.New(newClient(t, addr), locker.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	})
}

// multiImpls are the implementations of the multi-key scenario on the
// server at addr: locker.LockMulti beside bsm/redislock's ObtainMulti
// (retrying every millisecond, as its Obtain does in BenchmarkScenarios).
func multiImpls(addr string, ttl time.Duration) []scen.Impl {
	return []scen.Impl{
		scen.LockerMulti(func(b *testing.B) locker.Locker {
			l, err := redis.New(newClient(b, addr), locker.WithTTL(ttl))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}),
		{Name: "redislock", New: func(b *testing.B, key string) scen.Mutex {
			rl := redislock.New(newClient(b, addr))
			keys := scen.MultiKeys(key)
			opts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}
			return scen.Func(func(ctx context.Context) (func(context.Context) error, error) {
				for {
					lk, err := rl.ObtainMulti(ctx, keys, ttl, opts)
					if errors.Is(err, redislock.ErrNotObtained) && ctx.Err() == nil {
						continue // its retries ran out of their budget: wait on
					}
					if err != nil {
						return nil, err
					}
					return lk.Release, nil
				}
			})
		}},
	}
}
