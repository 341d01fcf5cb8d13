package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

// floorSemLua is the raw floor of a permit: the classic sorted-set counting
// semaphore, with no queue, no token and no limit check against other
// processes' limits.
//
// KEYS[1] the set of holders; ARGV[1] owner, ARGV[2] limit, ARGV[3] ttl ms.
const floorSemLua = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  return 1
end
return 0`

// BenchmarkSemaphoreUncontended: an uncontended permit (Acquire+Unlock of a
// semaphore of 4) against the floor's sorted-set semaphore (EVALSHA, then
// ZREM) and against this package's Lock+Unlock, timed back to back in each
// iteration, with a ctx that never ends and with a cancellable one (metrics
// ending in "-cancellable"; see ctxKinds). Targets: x-floor <= 1.2, x-lock <= 1.3.
// driver-x-floor-p50 is the same median ratio for the driver's own
// TryAcquireShared and Release (the two scripts' round trips without the
// Locker), timed right after the floor: what the scripts cost.
func BenchmarkSemaphoreUncontended(b *testing.B) {
	srv := benchServer(b)
	benchSemaphore(b, srv.Addr(), newClient(b, srv.Addr()))
}

// BenchmarkSemaphoreUncontendedOpen is BenchmarkSemaphoreUncontended on a
// Locker that owns its client, as Open makes it: a call with a cancellable
// ctx runs inline on a connection the Locker cuts when the ctx ends.
func BenchmarkSemaphoreUncontendedOpen(b *testing.B) {
	srv := benchServer(b)
	c := newOwnedClient(clientOptions(srv.Addr()))
	b.Cleanup(func() { _ = c.Close() })
	benchSemaphore(b, srv.Addr(), c)
}

// benchSemaphore is BenchmarkSemaphoreUncontended on a Locker on client,
// the floor on a client of addr.
func benchSemaphore(b *testing.B, addr string, client Client) {
	fc := newClient(b, addr)
	acquire := goredis.NewScript(floorSemLua)
	if err := acquire.Load(b.Context(), fc).Err(); err != nil {
		b.Fatal(err)
	}
	l, d := newTestLocker(b, client, locker.WithTTL(benchTTL))
	key := uniqueKey(b)
	fkey, lkey, dkey := key+"-floor", key+"-lock", key+"-driver"
	sem, _ := locker.NewSemaphore(l, key, 4)
	share := driver.Share{Mode: driver.Permits, Limit: 4, Weight: 1}
	kinds := ctxKinds(b)
	ps, drv := make([]pair, len(kinds)), make([]pair, len(kinds))
	lockTime := make([][]time.Duration, len(kinds))
	for it := 0; b.Loop(); it++ {
		i := ctxKind(it)
		ctx := kinds[i].ctx
		t0 := time.Now()
		if n, err := acquire.EvalSha(ctx, fc, []string{fkey}, "owner", 4, benchTTL.Milliseconds()).Int64(); err != nil || n != 1 {
			b.Fatalf("floor acquire: %v %v", n, err)
		}
		if err := fc.ZRem(ctx, fkey, "owner").Err(); err != nil {
			b.Fatalf("floor release: %v", err)
		}
		t1 := time.Now()
		g, err := d.TryAcquireShared(ctx, driver.Request{Key: dkey, Owner: "owner", TTL: benchTTL}, share)
		if err != nil {
			b.Fatalf("driver acquire: %v", err)
		}
		if err := d.Release(ctx, driver.Lease{Key: dkey, Owner: "owner", State: g.State}); err != nil {
			b.Fatalf("driver release: %v", err)
		}
		t2 := time.Now()
		if err := acquireRelease(ctx, func() (locker.Lock, error) { return sem.Acquire(ctx) }); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		if err := acquireRelease(ctx, func() (locker.Lock, error) { return l.Lock(ctx, lkey) }); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		ps[i].floor = append(ps[i].floor, t1.Sub(t0))
		ps[i].ours = append(ps[i].ours, t3.Sub(t2))
		lockTime[i] = append(lockTime[i], t4.Sub(t3))
		drv[i].floor = append(drv[i].floor, t1.Sub(t0))
		drv[i].ours = append(drv[i].ours, t2.Sub(t1))
	}
	for i, k := range kinds {
		p := ps[i]
		p.report(b, k.suffix)
		if len(drv[i].ours) > 0 && i == 0 {
			b.ReportMetric(drv[i].p50Ratio(), "driver-x-floor-p50") // the driver alone: the ctx makes no difference
		}
		if len(lockTime[i]) > 0 {
			var sem, lock time.Duration
			for j := range lockTime[i] {
				sem, lock = sem+p.ours[j], lock+lockTime[i][j]
			}
			b.ReportMetric(float64(lock)/float64(len(lockTime[i])), "lock-ns/op"+k.suffix)
			b.ReportMetric(float64(sem)/float64(max(lock, 1)), "x-lock"+k.suffix)
		}
	}
}

// acquireRelease takes a lock with acquire and unlocks it.
func acquireRelease(ctx context.Context, acquire func() (locker.Lock, error)) error {
	lk, err := acquire()
	if err != nil {
		return err
	}
	return lk.Unlock(ctx)
}
