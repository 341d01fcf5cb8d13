package redis_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// BenchmarkRedlockLockUnlock measures an uncontended Lock+Unlock on a
// single-node Locker and on Redlock over 3 and 5 masters, all on
// dedicated local redis-servers (the single node is the first master), in
// the same run. Redlock's acquisition is two round trips to every master
// (in parallel), its release one.
func BenchmarkRedlockLockUnlock(b *testing.B) {
	masters := testenv.NewRedisMasters(b, 5)
	single, err := redis.New(newClient(b, masters[0].Addr()), locker.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = single.Close() })
	run := func(b *testing.B, l locker.Locker) {
		ctx := b.Context()
		for i := 0; b.Loop(); i++ {
			lk, err := l.Lock(ctx, "bench:"+strconv.Itoa(i%64))
			if err != nil {
				b.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("redis", func(b *testing.B) { run(b, single) })
	for _, n := range []int{3, 5} {
		cs := make([]redis.Master, n)
		for i := range cs {
			cs[i] = newClient(b, masters[i].Addr())
		}
		l, err := redis.NewRedlock(cs, locker.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		b.Run("redlock-"+strconv.Itoa(n), func(b *testing.B) { run(b, l) })
	}
}

// BenchmarkRedlockHandoff measures, on 3 masters with the default backoff,
// the time from a holder's Unlock to the return of a Lock that started
// waiting 20 ms before: Redlock waiters poll (no queue, no pub/sub), so
// the hand-off is the rest of the waiter's current backoff step plus an
// acquisition.
func BenchmarkRedlockHandoff(b *testing.B) {
	masters := testenv.NewRedisMasters(b, 3)
	newLocker := func() locker.Locker {
		cs := make([]redis.Master, len(masters))
		for i, m := range masters {
			cs[i] = newClient(b, m.Addr())
		}
		l, err := redis.NewRedlock(cs, locker.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	holder, waiter := newLocker(), newLocker()
	ctx := b.Context()
	var lats []time.Duration
	for b.Loop() {
		b.StopTimer()
		lk, err := holder.Lock(ctx, "handoff")
		if err != nil {
			b.Fatal(err)
		}
		type got struct {
			at  time.Time
			lk  locker.Lock
			err error
		}
		res := make(chan got, 1)
		go func() {
			wl, err := waiter.Lock(ctx, "handoff")
			res <- got{time.Now(), wl, err}
		}()
		time.Sleep(20 * time.Millisecond)
		b.StartTimer()
		start := time.Now()
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		r := <-res
		b.StopTimer()
		if r.err != nil {
			b.Fatal(r.err)
		}
		lats = append(lats, r.at.Sub(start))
		if err := r.lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	slices.Sort(lats)
	ms := func(p float64) float64 {
		return float64(lats[int(p*float64(len(lats)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(ms(0.5), "handoff-p50-ms")
	b.ReportMetric(ms(0.9), "handoff-p90-ms")
}
