package redis_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

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
// server at addr: locker.LockMulti, fair (the default) and unfair
// (Config.Unfair), beside bsm/redislock's ObtainMulti (retrying every
// millisecond, as its Obtain does in BenchmarkScenarios), the reference:
// fair-x-redislock and unfair-x-redislock are the ratios of their rates.
// "fenced" is ObtainMulti with a fencing token per key (fencedMultiAcquire):
// fenced-x-redislock bounds what a lock with tokens can reach. "fifo"
// (newFIFOMulti) is the least a first come, first served lock with tokens
// costs: fifo-x-redislock bounds what fair LockMulti can reach.
func multiImpls(addr string, ttl time.Duration) []scen.Impl {
	lockers := func(cfg redis.Config) func(b *testing.B) locker.Locker {
		return func(b *testing.B) locker.Locker {
			l, err := cfg.New(newClient(b, addr), locker.WithTTL(ttl))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}
	}
	all := []scen.Impl{
		scen.LockerMulti("fair", lockers(redis.Config{})),
		scen.LockerMulti("unfair", lockers(redis.Config{Unfair: true})),
		{Name: "redislock", Reference: true, New: func(b *testing.B, key string) scen.Mutex {
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
		{Name: "fenced", New: func(b *testing.B, key string) scen.Mutex {
			c := newClient(b, addr)
			keys := scen.MultiKeys(key)
			names := append(slices.Clone(keys), make([]string, len(keys))...)
			for i, k := range keys {
				names[len(keys)+i] = k + ":fence"
			}
			return scen.Func(func(ctx context.Context) (func(context.Context) error, error) {
				owner := rand.Text()
				for {
					took, err := fencedMultiAcquire.Run(ctx, c, names, owner, ttl.Milliseconds()).Slice()
					if err != nil {
						return nil, err
					}
					if len(took) == len(keys) {
						return func(ctx context.Context) error {
							return fencedMultiRelease.Run(ctx, c, keys, owner).Err()
						}, nil
					}
					select {
					case <-time.After(time.Millisecond):
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
			})
		}},
		{Name: "fifo", New: func(b *testing.B, key string) scen.Mutex { return newFIFOMulti(b, addr, key, ttl) }},
	}
	if only := os.Getenv(multiImplsEnv); only != "" {
		names := strings.Split(only, ",")
		return slices.DeleteFunc(all, func(im scen.Impl) bool { return !slices.Contains(names, im.Name) })
	}
	return all
}

// multiImplsEnv, when set, names the implementations multiImpls keeps
// (comma-separated, e.g. "fair,redislock"): a profile or a system-call count
// of one implementation then sees only its own work.
const multiImplsEnv = "LOCKER_MULTI_IMPLS"

// fencedMultiAcquire is the acquire of the multi-key "fenced" reference:
// for n keys, KEYS[1..n] the locks and KEYS[n+i] lock i's token counter.
// When no lock exists it sets them all (PX ARGV[2]) and returns each one's
// new token (INCR of its counter); otherwise an empty list. It is the
// least a multi-key lock with a token per key costs on Redis: no queue, no
// label, counters that never expire.
var fencedMultiAcquire = goredis.NewScript(`local n = #KEYS / 2
if redis.call('EXISTS', unpack(KEYS, 1, n)) > 0 then return {} end
` + fencedTake)

// fencedTake ends the acquire scripts of the "fenced" and "fifo"
// references: it sets the n locks KEYS[1..n] to ARGV[1] (PX ARGV[2]) and
// returns each one's new token, the INCR of its counter KEYS[n+i].
const fencedTake = `local t = {}
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  t[i] = redis.call('INCR', KEYS[n + i])
end
return t`

// fencedMultiRelease deletes the locks KEYS when every one is ARGV[1]'s.
var fencedMultiRelease = goredis.NewScript(`local vs = redis.call('MGET', unpack(KEYS))
for i = 1, #KEYS do
  if vs[i] ~= ARGV[1] then return 0 end
end
return redis.call('DEL', unpack(KEYS))`)
