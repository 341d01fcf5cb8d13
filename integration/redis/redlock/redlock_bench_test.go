package redlock_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	scen "github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/integration/internal/slowlink"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// BenchmarkRedlock runs, in the same run and on dedicated local
// redis-servers, an uncontended Lock+Unlock and a hand-off (package
// contend's scenarios) of a single-node Locker (on the first master) and of
// Redlock over 3 and 5 masters. Redlock's acquisition is two round trips to
// every master (in parallel), its release one; its waiters poll with the
// default backoff (no queue, no pub/sub), so a hand-off is the rest of the
// waiter's backoff step plus an acquisition.
//
//	go test -run '^$' -bench Redlock ./integration/redis/redlock/
func BenchmarkRedlock(b *testing.B) {
	masters := testenv.NewRedisMasters(b, 5)
	const ttl = 10 * time.Second
	impls := []scen.Impl{
		{Name: "redis", New: scen.Locker(func(b *testing.B) locker.Locker {
			l, err := redis.New(newClient(b, masters[0].Addr()), locker.WithTTL(ttl))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}).New},
	}
	for _, n := range []int{3, 5} {
		impls = append(impls, scen.Impl{Name: "redlock" + strconv.Itoa(n), New: scen.Locker(func(b *testing.B) locker.Locker {
			cs := make([]redis.Master, n)
			for i := range cs {
				cs[i] = newClient(b, masters[i].Addr())
			}
			// Fresh servers that never held a lock: no restart delay.
			l, err := redis.RedlockConfig{RestartDelay: time.Millisecond}.New(cs, locker.WithTTL(ttl))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}).New})
	}
	b.Run("Uncontended", func(b *testing.B) { scen.Uncontended(b, impls) })
	b.Run("Handoff", func(b *testing.B) { scen.Handoff(b, impls, 50) })
}

// BenchmarkRedlockSlowMaster measures what a slow master costs one Locker
// of Redlock over 3 masters, whose connections to the first are on a
// link (package slowlink) that delays each way by slow: a TryLock refused
// on a held key (the others' "held" settle it; it then waits, up to TTL/4,
// for the slow master's answer, so that its request cannot take the key
// after an Unlock), and an Unlock (settled by the two fast masters). The
// metrics are the medians of their latencies.
//
//	go test -run '^$' -bench RedlockSlowMaster -benchtime 40x ./integration/redis/redlock/
func BenchmarkRedlockSlowMaster(b *testing.B) {
	masters := testenv.NewRedisMasters(b, 3)
	testenv.AwaitRedisUptime(b, masters, time.Second) // the acquire script counts whole seconds
	const ttl = 10 * time.Second
	const slow = 20 * time.Millisecond
	newLocker := func(link *slowlink.Link) locker.Locker {
		cs := make([]redis.Master, len(masters))
		for i, m := range masters {
			o := clientOptions(m.Addr())
			if i == 0 && link != nil {
				o.Dialer = link.Dial(m.Addr())
			}
			c := goredis.NewClient(o)
			b.Cleanup(func() { _ = c.Close() })
			cs[i] = c
		}
		// Fresh servers that never held a lock: no restart delay.
		l, err := redis.RedlockConfig{RestartDelay: time.Millisecond}.New(cs, locker.WithTTL(ttl))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	holder := newLocker(nil)
	link := new(slowlink.Link)
	l := newLocker(link)
	ctx := b.Context()
	held, err := holder.TryLock(ctx, "slow-held")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = held.Unlock(ctx) }()
	// Connections made before the link turns slow.
	if lk, err := l.TryLock(ctx, "slow-free"); err != nil {
		b.Fatal(err)
	} else if err := lk.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	defer link.Slow(slow)()
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.Run("RefusedTryLock", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := l.TryLock(ctx, "slow-held"); !errors.Is(err, locker.ErrNotAcquired) {
				b.Fatalf("TryLock on a held key: %v", err)
			}
			ds = append(ds, time.Since(start))
		}
		b.ReportMetric(median(ds), "p50-ms")
	})
	b.Run("Unlock", func(b *testing.B) {
		var ds []time.Duration
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			lk, err := l.TryLock(ctx, "slow-free-"+strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start := time.Now()
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		b.ReportMetric(median(ds), "p50-ms")
	})
}
