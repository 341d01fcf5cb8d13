package redis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// The benchmarks measure, in the same run and on the same server, the raw
// floor (what a hand-written SET NX PX lock costs on one go-redis client) and
// this package, and report the ratio. Each iteration of LockUnlock and
// TryLockHeld times one floor operation and one of ours back to back, so that
// load from other processes on the machine hits both alike: x-floor is the
// ratio of the means, x-floor-p50 the median of the per-iteration ratios.
// BenchmarkContended alternates rounds of the floor and of ours for the same
// reason.
//
// LockUnlock, TryLockHeld and SemaphoreUncontended give ours and the floor
// the same ctx, of two kinds in turn, ctxBlock iterations at a time:
// context.Background() (a ctx that never ends, as a cron job passes) and a
// cancellable one. The first kind's figures have the plain names, the
// second's end in "-cancellable". Blocks rather than single iterations: a
// detached call right after inline ones finds the engine's worker cold,
// which a caller that always passes one kind never does.

// floorUnlockLua is the floor's compare-and-delete.
const floorUnlockLua = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

// benchTTL is the TTL of the benchmarks' locks.
const benchTTL = 10 * time.Second

// floor is the hand-written lock of the raw floor.
type floor struct {
	c      *goredis.Client
	unlock *goredis.Script
}

func newFloor(b *testing.B, addr string) *floor {
	f := &floor{c: newClient(b, addr), unlock: goredis.NewScript(floorUnlockLua)}
	if err := f.unlock.Load(b.Context(), f.c).Err(); err != nil {
		b.Fatal(err)
	}
	return f
}

// tryLock is SET key owner NX PX ttl.
func (f *floor) tryLock(ctx context.Context, key, owner string) (bool, error) {
	return f.c.SetNX(ctx, key, owner, benchTTL).Result()
}

// release is EVALSHA compare-and-delete.
func (f *floor) release(ctx context.Context, key, owner string) (int64, error) {
	return f.unlock.EvalSha(ctx, f.c, []string{key}, owner).Int64()
}

// pair accumulates the paired timings of a benchmark.
type pair struct{ floor, ours []time.Duration }

func (p *pair) report(b *testing.B, suffix string) {
	mean := func(ds []time.Duration) float64 {
		var s time.Duration
		for _, d := range ds {
			s += d
		}
		return float64(s) / float64(len(ds))
	}
	if len(p.ours) == 0 {
		return
	}
	if suffix == "" {
		b.ReportMetric(mean(p.ours), "ns/op")
	} else {
		b.ReportMetric(mean(p.ours), "ours-ns/op"+suffix)
	}
	b.ReportMetric(mean(p.floor), "floor-ns/op"+suffix)
	b.ReportMetric(mean(p.ours)/mean(p.floor), "x-floor"+suffix)
	b.ReportMetric(p.p50Ratio(), "x-floor-p50"+suffix)
}

// ctxBlock is how many iterations in a row use one kind of ctx.
const ctxBlock = 50

// ctxKinds are the two ctxs the uncontended benchmarks give ours and the
// floor alike, with the suffix of their metrics: one that never ends, for
// which the Locker calls the store inline, and a cancellable one.
// Iteration i uses kind ctxKind(i).
func ctxKind(i int) int { return i / ctxBlock % 2 }

func ctxKinds(b *testing.B) []struct {
	ctx    context.Context
	suffix string
} {
	return []struct {
		ctx    context.Context
		suffix string
	}{{context.Background(), ""}, {b.Context(), "-cancellable"}}
}

// p50Ratio is the median of the per-iteration ratios ours ÷ floor; p must
// hold at least one pair.
func (p *pair) p50Ratio() float64 {
	ratios := make([]float64, len(p.ours))
	for i := range p.ours {
		ratios[i] = float64(p.ours[i]) / float64(max(p.floor[i], 1))
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2]
}

func benchServer(b *testing.B) *storeenv.Server { return storeenv.Redis(b) }

// BenchmarkLockUnlock: uncontended Lock+Unlock against the floor's SET NX PX
// plus EVALSHA compare-and-delete, with a ctx that never ends and with a
// cancellable one. Target: x-floor <= 1.2.
func BenchmarkLockUnlock(b *testing.B) {
	srv := benchServer(b)
	l, _ := newTestLocker(b, newClient(b, srv.Addr()), locker.WithTTL(benchTTL))
	benchLockUnlock(b, srv.Addr(), l)
}

// BenchmarkLockUnlockOwnClient is BenchmarkLockUnlock with Config.OwnClient
// on the caller's client: the Locker runs its calls on a client of its own,
// as one from Open does. Target: x-floor-p50-cancellable not above
// x-floor-p50.
func BenchmarkLockUnlockOwnClient(b *testing.B) {
	srv := benchServer(b)
	l, err := Config{OwnClient: true}.New(newClient(b, srv.Addr()), locker.WithTTL(benchTTL))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	benchLockUnlock(b, srv.Addr(), l)
}

// BenchmarkLockUnlockOpen is BenchmarkLockUnlock on a Locker that owns its
// client, as Open makes it: a call with a cancellable ctx runs inline on a
// connection the Locker cuts when the ctx ends. Target: x-floor-p50-cancellable
// not above x-floor-p50.
func BenchmarkLockUnlockOpen(b *testing.B) {
	srv := benchServer(b)
	c := newOwnedClient(clientOptions(srv.Addr()))
	b.Cleanup(func() { _ = c.Close() })
	l, _ := newTestLocker(b, c, locker.WithTTL(benchTTL))
	benchLockUnlock(b, srv.Addr(), l)
}

// benchLockUnlock is BenchmarkLockUnlock on l, the floor on a client of
// addr.
func benchLockUnlock(b *testing.B, addr string, l locker.Locker) {
	f := newFloor(b, addr)
	key, fkey := uniqueKey(b), uniqueKey(b)+"-floor"
	kinds := ctxKinds(b)
	ps := make([]pair, len(kinds))
	for it := 0; b.Loop(); it++ {
		i := ctxKind(it)
		ctx := kinds[i].ctx
		t0 := time.Now()
		ok, err := f.tryLock(ctx, fkey, "owner")
		if err != nil || !ok {
			b.Fatalf("floor SET NX: %v %v", ok, err)
		}
		if n, err := f.release(ctx, fkey, "owner"); err != nil || n != 1 {
			b.Fatalf("floor release: %v %v", n, err)
		}
		t1 := time.Now()
		lk, err := l.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		ps[i].floor = append(ps[i].floor, t1.Sub(t0))
		ps[i].ours = append(ps[i].ours, t2.Sub(t1))
	}
	for i, k := range kinds {
		ps[i].report(b, k.suffix)
	}
}

// BenchmarkTryLockHeld: TryLock refused on a key another Locker holds, against
// one EVALSHA round trip (the floor's compare-and-delete, refused), with a
// ctx that never ends and with a cancellable one. Target: x-floor <= 1.1.
func BenchmarkTryLockHeld(b *testing.B) {
	srv := benchServer(b)
	f := newFloor(b, srv.Addr())
	holder, _ := newTestLocker(b, newClient(b, srv.Addr()), locker.WithTTL(benchTTL))
	l, _ := newTestLocker(b, newClient(b, srv.Addr()), locker.WithTTL(benchTTL))
	key := uniqueKey(b)
	lk, err := holder.Lock(b.Context(), key)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = lk.Unlock(context.WithoutCancel(b.Context())) }()
	fkey := lockKey(key)
	kinds := ctxKinds(b)
	ps := make([]pair, len(kinds))
	for it := 0; b.Loop(); it++ {
		i := ctxKind(it)
		ctx := kinds[i].ctx
		t0 := time.Now()
		if n, err := f.release(ctx, fkey, "not the owner"); err != nil || n != 0 {
			b.Fatalf("floor EVALSHA: %v %v", n, err)
		}
		t1 := time.Now()
		if _, err := l.TryLock(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
			b.Fatalf("TryLock on a held key: %v", err)
		}
		t2 := time.Now()
		ps[i].floor = append(ps[i].floor, t1.Sub(t0))
		ps[i].ours = append(ps[i].ours, t2.Sub(t1))
	}
	for i, k := range kinds {
		ps[i].report(b, k.suffix)
	}
}

// BenchmarkHandoff: from the holder's Unlock to the return of the Lock that
// another Locker has been waiting in. Target: p50 <= 1 ms.
func BenchmarkHandoff(b *testing.B) {
	srv := benchServer(b)
	holder, _ := newTestLocker(b, newClient(b, srv.Addr()), locker.WithTTL(benchTTL))
	waiter, _ := newTestLocker(b, newClient(b, srv.Addr()), locker.WithTTL(benchTTL))
	benchHandoff(b, newClient(b, srv.Addr()), holder, waiter)
}

// benchHandoff times, b.N times, the hand-off from holder's Unlock to the
// return of the Lock waiter has been waiting in, and reports its
// percentiles.
func benchHandoff(b *testing.B, admin *goredis.Client, holder, waiter locker.Locker) {
	ctx := b.Context()
	key := uniqueKey(b)
	type got struct {
		at  time.Time
		err error
	}
	var lats []time.Duration
	for b.Loop() {
		b.StopTimer()
		lk, err := holder.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		res := make(chan got, 1)
		release := make(chan struct{})
		go func() {
			wl, err := waiter.Lock(ctx, key)
			res <- got{time.Now(), err}
			if err == nil {
				<-release
				_ = wl.Unlock(ctx)
			}
			close(res)
		}()
		waitQueued(b, ctx, admin, key, 1)
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
		close(release)
		<-res
		b.StartTimer()
	}
	slices.Sort(lats)
	ms := func(p float64) float64 {
		return float64(lats[int(p*float64(len(lats)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(ms(0.5), "handoff-p50-ms")
	b.ReportMetric(ms(0.9), "handoff-p90-ms")
	b.ReportMetric(ms(0.99), "handoff-p99-ms")
}

// contenders is the number of Lockers of BenchmarkContended.
const contenders = 16

// BenchmarkContended: 16 Lockers (each with its own client, as 16 processes
// would have) Lock and Unlock one key in a loop; the floor is 16 clients
// spinning on SET NX PX and releasing with EVALSHA. Rounds of the floor and of
// ours alternate (b.N hand-offs for each in all). Reports hand-offs per second for
// both, their ratio (x-floor-rate, target >= 1), the fewest and most
// acquisitions a Locker got (every Locker must be served), and the Redis
// commands per hand-off.
func BenchmarkContended(b *testing.B) {
	srv := benchServer(b)
	floorKey, key := uniqueKey(b)+"-floor", uniqueKey(b)
	floors := make([]*floor, contenders)
	lockers := make([]locker.Locker, contenders)
	fcount, lcount := &countingHook{}, &countingHook{}
	for i := range contenders {
		floors[i] = newFloor(b, srv.Addr())
		floors[i].c.AddHook(fcount)
		c := newClient(b, srv.Addr())
		c.AddHook(lcount)
		lockers[i], _ = newTestLocker(b, c, locker.WithTTL(benchTTL))
	}
	floorRound := func(ctx context.Context, i int) error {
		owner := fmt.Sprint(i)
		for {
			ok, err := floors[i].tryLock(ctx, floorKey, owner)
			if err != nil {
				return err
			}
			if ok {
				break
			}
		}
		_, err := floors[i].release(ctx, floorKey, owner)
		return err
	}
	lockerRound := func(ctx context.Context, i int) error {
		lk, err := lockers[i].Lock(ctx, key)
		if err != nil {
			return err
		}
		return lk.Unlock(ctx)
	}
	const rounds = 8
	var floorTime, ourTime time.Duration
	var floorN, ourN int
	fcounts, lcounts := make([]int, contenders), make([]int, contenders)
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		floorTime += contend(b, n, fcounts, floorRound)
		floorN += n
		ourTime += contend(b, n, lcounts, lockerRound)
		ourN += n
	}
	b.StopTimer()
	if ourN == 0 || floorN == 0 {
		return
	}
	floorRate := float64(floorN) / floorTime.Seconds()
	rate := float64(ourN) / ourTime.Seconds()
	b.ReportMetric(float64(ourTime)/float64(ourN), "ns/op")
	b.ReportMetric(rate, "handoffs/s")
	b.ReportMetric(floorRate, "floor-handoffs/s")
	b.ReportMetric(rate/floorRate, "x-floor-rate")
	b.ReportMetric(float64(slices.Min(lcounts)), "min-per-locker")
	b.ReportMetric(float64(slices.Max(lcounts)), "max-per-locker")
	b.ReportMetric(float64(slices.Min(fcounts)), "floor-min-per-client")
	b.ReportMetric(float64(slices.Max(fcounts)), "floor-max-per-client")
	b.ReportMetric(float64(lcount.commands.Load())/float64(ourN), "cmds/handoff")
	b.ReportMetric(float64(fcount.commands.Load())/float64(floorN), "floor-cmds/handoff")
}

// contend runs n acquisitions spread over the contenders, each calling
// acquire in a loop, adds each contender's acquisitions to counts, and
// returns how long it took.
func contend(b *testing.B, n int, counts []int, acquire func(ctx context.Context, i int) error) time.Duration {
	ctx := b.Context()
	var left atomic.Int64
	left.Store(int64(n))
	got := make([]int, contenders)
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for i := range contenders {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := acquire(ctx, i); err != nil {
					failed.Store(err)
					return
				}
				got[i]++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	for i := range counts {
		counts[i] += got[i]
	}
	return elapsed
}

// BenchmarkHold10k: one Locker holds 10,000 locks through a few renewal
// ticks. Reports the round trips (pipelines) per tick, the renewals per
// round trip, the duration of one renewal round trip, and the heap bytes per
// held lock. The experiment runs once whatever b.N (it takes a few seconds).
func BenchmarkHold10k(b *testing.B) {
	const n = 10_000
	srv := benchServer(b)
	ttl := 3 * time.Second
	c := newClient(b, srv.Addr())
	hook := &countingHook{}
	c.AddHook(hook)
	l, _ := newTestLocker(b, c, locker.WithTTL(ttl))
	ctx := b.Context()
	base := uniqueKey(b)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", base, i)
	}
	locks := make([]locker.Lock, 0, n)
	var perLock, perTick, perTrip, tripTime float64
	{
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, k := range keys {
			lk, err := l.TryLock(ctx, k)
			if err != nil {
				b.Fatal(err)
			}
			locks = append(locks, lk)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perLock = float64(after.HeapAlloc-before.HeapAlloc) / n

		// Count from the first renewal round on, over two TTLs.
		p0 := hook.pipelines.Load()
		for hook.pipelines.Load() == p0 {
			time.Sleep(5 * time.Millisecond)
		}
		start := time.Now()
		p1, c1, t1 := hook.pipelines.Load(), hook.piped.Load(), hook.pipeTime.Load()
		time.Sleep(2 * ttl)
		p2, c2, t2 := hook.pipelines.Load(), hook.piped.Load(), hook.pipeTime.Load()
		ticks := float64(time.Since(start)) / float64(ttl/3)
		for _, lk := range locks {
			if err := lk.Err(); err != nil {
				b.Fatalf("lock lost: %v", err)
			}
		}
		trips := float64(max(p2-p1, 1))
		perTick = float64(p2-p1) / ticks
		perTrip = float64(c2-c1) / trips
		tripTime = float64(t2-t1) / trips / float64(time.Millisecond)
		for _, lk := range locks {
			_ = lk.Unlock(ctx)
		}
	}
	for b.Loop() { // the experiment above does not depend on b.N
	}
	b.ReportMetric(perTick, "round-trips/tick")
	b.ReportMetric(perTrip, "renewals/round-trip")
	b.ReportMetric(tripTime, "ms/round-trip")
	b.ReportMetric(perLock, "bytes/lock")
}
