package redis_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	scen "github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// BenchmarkScenarios runs the scenarios of package contend on one
// redis-server: this library (fair, the default, and unfair) beside the raw
// floor (SET NX PX retried at once, compare-and-delete by script),
// bsm/redislock (retrying every millisecond) and "fenced", redislock's
// retry with a fencing token (fencedAcquire): the least a fenced lock
// costs, which bounds what this library can reach against the peers
// without one. Every implementation reports its ratios to "fenced"
// ("fair-x-fenced", "unfair-x-fenced", ...). "fifo" (newFIFO) is the least
// a first come, first served lock with a token costs, the reference of the
// fair mode: "fair-x-fifo" is what fair reaches of it, and "fifo-x-fenced"
// what a hand-off on every acquisition costs against fenced's releaser,
// which takes the key again at once (its "-again"). The multi-key scenario runs
// LockMulti, fair and unfair, beside redislock's ObtainMulti and a fenced
// ObtainMulti (multiImpls). Each client is on a connection of its own:
//
//	go test -run '^$' -bench Scenarios ./integration/redis/
func BenchmarkScenarios(b *testing.B) {
	addr := testenv.Redis(b).Addr()
	const ttl = 10 * time.Second
	impls := []scen.Impl{
		{Name: "fair", New: scen.Locker(func(b *testing.B) locker.Locker {
			l, err := redis.New(newClient(b, addr), locker.WithTTL(ttl))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}).New},
		{Name: "unfair", New: scen.Locker(func(b *testing.B) locker.Locker {
			l, err := redis.Config{Unfair: true}.New(newClient(b, addr), locker.WithTTL(ttl))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}).New},
		{Name: "floor", New: func(b *testing.B, key string) scen.Mutex {
			c := newClient(b, addr)
			return scen.Func(func(ctx context.Context) (func(context.Context) error, error) {
				owner := rand.Text()
				for {
					ok, err := c.SetNX(ctx, key, owner, ttl).Result()
					if err != nil {
						return nil, err
					}
					if ok {
						return func(ctx context.Context) error {
							return floorUnlock.Run(ctx, c, []string{key}, owner).Err()
						}, nil
					}
				}
			})
		}},
		{Name: "redislock", New: func(b *testing.B, key string) scen.Mutex {
			rl := redislock.New(newClient(b, addr))
			opts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}
			return scen.Func(func(ctx context.Context) (func(context.Context) error, error) {
				for {
					lk, err := rl.Obtain(ctx, key, ttl, opts)
					if errors.Is(err, redislock.ErrNotObtained) && ctx.Err() == nil {
						continue // its retries ran out of the ctx's deadline budget: wait on
					}
					if err != nil {
						return nil, err
					}
					return lk.Release, nil
				}
			})
		}},
		{Name: "fenced", Reference: true, New: func(b *testing.B, key string) scen.Mutex {
			c := newClient(b, addr)
			keys := []string{key, key + ":fence"}
			return scen.Func(func(ctx context.Context) (func(context.Context) error, error) {
				owner := rand.Text()
				for {
					token, err := fencedAcquire.Run(ctx, c, keys, owner, ttl.Milliseconds()).Int64()
					if err != nil {
						return nil, err
					}
					if token > 0 {
						return func(ctx context.Context) error {
							return floorUnlock.Run(ctx, c, keys[:1], owner).Err()
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
		{Name: "fifo", New: func(b *testing.B, key string) scen.Mutex {
			return newFIFO(b, addr, []string{key}, ttl)
		}},
	}
	stats := newClient(b, addr)
	for i := range impls {
		impls[i].ServerCPU = serverCPU(stats)
		impls[i].ServerCalls = serverCalls(stats)
	}
	scen.Scenarios(b, impls, 3*time.Second)
	// Three keys at once: LockMulti, fair and unfair, beside redislock's
	// ObtainMulti (multiImpls).
	multi := multiImpls(addr, ttl)
	for i := range multi {
		multi[i].ServerCPU = serverCPU(stats)
		multi[i].ServerCalls = serverCalls(stats)
	}
	b.Run("MultiKey/clients=8", func(b *testing.B) { scen.OneKey(b, multi, 8, 3*time.Second) })
}

// serverCPU returns a reader of the CPU time the server of c has used
// (used_cpu_sys + used_cpu_user of INFO cpu).
func serverCPU(c *goredis.Client) func(context.Context) (time.Duration, error) {
	return func(ctx context.Context) (time.Duration, error) {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return 0, err
		}
		var total float64
		found := 0
		for line := range strings.Lines(info) {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu: %s: %w", name, err)
			}
			total += f
			found++
		}
		if found != 2 {
			return 0, errors.New("INFO cpu: no used_cpu_sys and used_cpu_user")
		}
		return time.Duration(total * float64(time.Second)), nil
	}
}

// serverCalls returns a reader of what the server of c has run (INFO
// commandstats, whose calls count the commands scripts call): its
// commands, the scripts among them (EVAL, EVALSHA and their read-only
// forms) and their time, and the messages published (PUBLISH and
// SPUBLISH, the scripts' included). The INFO commands of the readers are
// left out.
func serverCalls(c *goredis.Client) func(context.Context) (scen.Calls, error) {
	return func(ctx context.Context) (scen.Calls, error) {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return scen.Calls{}, err
		}
		var calls scen.Calls
		for line := range strings.Lines(info) {
			name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
			cmd, isCmd := strings.CutPrefix(name, "cmdstat_")
			if !ok || !isCmd || cmd == "info" {
				continue
			}
			var n, usec int64
			for field := range strings.SplitSeq(stats, ",") {
				k, v, _ := strings.Cut(field, "=")
				switch k {
				case "calls":
					n, err = strconv.ParseInt(v, 10, 64)
				case "usec":
					usec, err = strconv.ParseInt(v, 10, 64)
				}
				if err != nil {
					return scen.Calls{}, fmt.Errorf("INFO commandstats: %s: %w", name, err)
				}
			}
			calls.Commands += n
			switch {
			case strings.HasPrefix(cmd, "eval"):
				calls.Scripts += n
				calls.ScriptTime += time.Duration(usec) * time.Microsecond
			case cmd == "publish", cmd == "spublish":
				calls.Messages += n
			}
		}
		return calls, nil
	}
}

// fencedAcquire is the acquire of the "fenced" reference: SET NX PX and, when
// that took the key, INCR of a counter key for the fencing token, in one
// script. It is the least a lock with a fencing token costs on Redis (it
// has no queue, no label and a counter that must never expire), where the
// floor and redislock have no token at all.
var fencedAcquire = goredis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end return 0`)

// floorUnlock is the floor's compare-and-delete.
var floorUnlock = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// TestServerCallsCounts checks serverCalls, whose figures the Scenarios
// benchmark reports per acquisition: a script that publishes counts as a
// script and as a message, and so does a PUBLISH of its own.
func TestServerCallsCounts(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	read := serverCalls(c)
	before, err := read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	channel := "calls-test:" + rand.Text()
	if err := goredis.NewScript(`return redis.call('PUBLISH', KEYS[1], 'x')`).Run(t.Context(), c, []string{channel}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(t.Context(), channel, "y").Err(); err != nil {
		t.Fatal(err)
	}
	after, err := read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Other packages' tests may share the server and publish meanwhile.
	if got := after.Messages - before.Messages; got < 2 {
		t.Errorf("messages: %d, want at least 2", got)
	}
	if got := after.Scripts - before.Scripts; got < 1 {
		t.Errorf("scripts: %d, want at least 1", got)
	}
}
