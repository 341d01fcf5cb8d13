// Package sharedbench holds the benchmarks of semaphores and read-write
// locks that every backend with shared holds runs on its own store, so that
// their figures compare.
package sharedbench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/contend"
)

// Closing returns l, which b closes when it ends; a nil l (its harness
// reported why) ends b at once.
func Closing(b *testing.B, l locker.Locker) locker.Locker {
	if l == nil {
		b.FailNow()
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// handoffWait is how long the waiter has been waiting when the holder
// releases.
const handoffWait = 20 * time.Millisecond

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Uncontended compares an uncontended semaphore permit and read hold with
// a lock of l, on keys under key: one acquire and one release each, in
// turn, in a rotating order, after one untimed round. It reports the
// ratios of the means (sem-x-lock, rlock-x-lock) and of the medians
// (sem-x-lock-p50, rlock-x-lock-p50).
func Uncontended(b *testing.B, l locker.Locker, key string) {
	ctx := b.Context()
	sem, err := locker.NewSemaphore(l, key+"/sem", 4)
	if err != nil {
		b.Fatal(err)
	}
	rw, err := locker.NewRWMutex(l, key+"/rw")
	if err != nil {
		b.Fatal(err)
	}
	acquire := []func() (locker.Lock, error){
		func() (locker.Lock, error) { return l.Lock(ctx, key+"/lock") },
		func() (locker.Lock, error) { return sem.Acquire(ctx) },
		func() (locker.Lock, error) { return rw.RLock(ctx) },
	}
	// One of each first, untimed: a key's first hold and a driver's
	// statement preparation are not what an uncontended hold costs.
	for _, take := range acquire {
		lk, err := take()
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var spent [3]time.Duration
	var each [3][]time.Duration
	n := 0
	for b.Loop() {
		for j := range 3 {
			k := (n + j) % 3
			t := time.Now()
			lk, err := acquire[k]()
			if err != nil {
				b.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t)
			spent[k] += d
			each[k] = append(each[k], d)
		}
		n++
	}
	b.ReportMetric(float64(spent[0].Nanoseconds())/float64(n), "lock-ns/op")
	b.ReportMetric(float64(spent[1].Nanoseconds())/float64(n), "sem-ns/op")
	b.ReportMetric(float64(spent[2].Nanoseconds())/float64(n), "rlock-ns/op")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "sem-x-lock")
	b.ReportMetric(float64(spent[2])/float64(spent[0]), "rlock-x-lock")
	// Medians, which a few slow rounds on a busy machine move less.
	p50 := medians(each)
	b.ReportMetric(float64(p50[1])/float64(p50[0]), "sem-x-lock-p50")
	b.ReportMetric(float64(p50[2])/float64(p50[0]), "rlock-x-lock-p50")
}

// medians sorts each series of each and returns its median.
func medians(each [3][]time.Duration) (p50 [3]time.Duration) {
	for k := range each {
		slices.Sort(each[k])
		p50[k] = each[k][len(each[k])/2]
	}
	return p50
}

// VsFloor times, in turn, an uncontended permit of a semaphore of 4 on l
// (Acquire+Unlock, on key+"/sem"), floor (the backend's statements for a
// permit, sent by hand: one take and one release, failing when they did
// not take or release), and a Lock+Unlock of l (on key+"/lock"), so that
// all three see the same machine load, after 50 untimed rounds.
// It reports sem-x-floor (ratio of medians, target ≤ 1.2),
// sem-x-floor-mean, sem-x-lock-p50 (ratio of medians, target ≤ 1.3) and
// the medians in µs.
func VsFloor(b *testing.B, l locker.Locker, key string, floor func(context.Context) error) {
	ctx := b.Context()
	sem, err := locker.NewSemaphore(l, key+"/sem", 4)
	if err != nil {
		b.Fatal(err)
	}
	once := func(take func() (locker.Lock, error)) error {
		lk, err := take()
		if err != nil {
			return err
		}
		return lk.Unlock(ctx)
	}
	rounds := []func() error{
		func() error { return floor(ctx) },
		func() error { return once(func() (locker.Lock, error) { return sem.Acquire(ctx) }) },
		func() error { return once(func() (locker.Lock, error) { return l.Lock(ctx, key+"/lock") }) },
	}
	for range 50 { // warm the pools and statement caches
		for _, f := range rounds {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		}
	}
	var each [3][]time.Duration
	var spent [3]time.Duration
	for b.Loop() {
		for k, f := range rounds {
			t := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t)
			each[k], spent[k] = append(each[k], d), spent[k]+d
		}
	}
	p50 := medians(each)
	b.ReportMetric(float64(p50[1])/float64(p50[0]), "sem-x-floor")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "sem-x-floor-mean")
	b.ReportMetric(float64(p50[1])/float64(p50[2]), "sem-x-lock-p50")
	b.ReportMetric(float64(p50[0].Microseconds()), "floor-p50-us")
	b.ReportMetric(float64(p50[1].Microseconds()), "sem-p50-us")
	b.ReportMetric(float64(p50[2].Microseconds()), "lock-p50-us")
}

// Handoff times how long a released lock, and a released permit of a
// semaphore of one, take to reach waiter, which waits for them on keys
// under key, in turn; it reports the permit's p50 as a multiple of the
// lock's.
func Handoff(b *testing.B, holder, waiter locker.Locker, key string) {
	ctx := b.Context()
	hs, err := locker.NewSemaphore(holder, key+"/sem", 1)
	if err != nil {
		b.Fatal(err)
	}
	ws, err := locker.NewSemaphore(waiter, key+"/sem", 1)
	if err != nil {
		b.Fatal(err)
	}
	kinds := []struct {
		hold, wait func() (locker.Lock, error)
	}{
		{func() (locker.Lock, error) { return holder.Lock(ctx, key+"/lock") }, func() (locker.Lock, error) { return waiter.Lock(ctx, key+"/lock") }},
		{func() (locker.Lock, error) { return hs.Acquire(ctx) }, func() (locker.Lock, error) { return ws.Acquire(ctx) }},
	}
	var lats [2][]time.Duration
	for b.Loop() {
		for k, kind := range kinds {
			b.StopTimer()
			lk, err := kind.hold()
			if err != nil {
				b.Fatal(err)
			}
			res := make(chan time.Time, 1)
			go func() {
				wl, err := kind.wait()
				if err != nil {
					b.Error(err)
					res <- time.Time{}
					return
				}
				res <- time.Now()
				_ = wl.Unlock(ctx)
			}()
			time.Sleep(handoffWait)
			b.StartTimer()
			start := time.Now()
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			at := <-res
			if at.IsZero() {
				b.FailNow()
			}
			lats[k] = append(lats[k], at.Sub(start))
		}
	}
	for k := range lats {
		slices.Sort(lats[k])
	}
	lock, permit := lats[0][len(lats[0])/2], lats[1][len(lats[1])/2]
	b.ReportMetric(ms(lock), "lock-p50-ms")
	b.ReportMetric(ms(permit), "permit-p50-ms")
	b.ReportMetric(float64(permit)/float64(lock), "permit-x-lock")
}

// throughputClients is how many clients Throughput races on one key, and
// throughputWork how long each holds its permit: the work a permit guards.
const (
	throughputClients = 16
	throughputWork    = 5 * time.Millisecond
	throughputRounds  = 4 // acquisitions per client per phase
	throughputPairs   = 9 // pairs of phases per iteration
)

// Throughput races 16 clients, each a Locker of its own from newLocker, on
// semaphores of limit 1 and of limit 4 (keys under key), each client
// holding its permit for a few milliseconds of work. See ThroughputTraffic.
func Throughput(b *testing.B, newLocker func() locker.Locker, key string) {
	ThroughputTraffic(b, newLocker, key, nil)
}

// ThroughputTraffic is Throughput, and with traffic (nil: none) it also
// reports the round trips per grant of each limit (limit1-trips/grant,
// limit4-trips/grant), counted over every client's connections.
//
// An iteration runs 9 pairs of phases: a phase of limit 1 and one of
// limit 4, on fresh keys, in an order that alternates from pair to pair,
// so that a change of the machine's load weighs on both limits alike.
// It reports the grants per second of each limit over every phase, and
// x-limit1: the median over the pairs of the limit-4 phase's throughput
// divided by the limit-1 phase's. The target is at least 3, for a
// semaphore of 4 must run about four times as much work at once as a
// mutex. x-limit1-min and x-limit1-max are the extremes of those ratios,
// and x-limit1-total is the ratio of the limits' total times.
// limit1-cpu-ms/grant and limit4-cpu-ms/grant are the CPU time the
// process spent per grant (its clients, and the store when it runs in the
// process): a limit whose grants cost the same CPU runs four times as
// many per second, so it needs four times the CPU the other one does.
func ThroughputTraffic(b *testing.B, newLocker func() locker.Locker, key string, traffic Traffic) {
	ctx := b.Context()
	lockers := make([]locker.Locker, throughputClients)
	for i := range lockers {
		lockers[i] = newLocker()
	}
	var trips [2]int64       // limit 1, limit 4
	var cpu [2]time.Duration // the process's CPU time
	cpuOK := true
	phase := func(limit, round int) time.Duration {
		k := fmt.Sprintf("%s/limit%d-%d", key, limit, round)
		sems := make([]*locker.Semaphore, len(lockers))
		for i, l := range lockers {
			s, err := locker.NewSemaphore(l, k, limit)
			if err != nil {
				b.Fatal(err)
			}
			sems[i] = s
		}
		var t0 int64
		if traffic != nil {
			t0, _ = traffic()
		}
		c0, ok0 := contend.ProcessCPU()
		var wg sync.WaitGroup
		start := time.Now()
		for _, s := range sems {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range throughputRounds {
					p, err := s.Acquire(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					time.Sleep(throughputWork)
					if err := p.Unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		d := time.Since(start)
		c1, ok1 := contend.ProcessCPU()
		cpu[min(limit/4, 1)] += c1 - c0
		cpuOK = cpuOK && ok0 && ok1
		if traffic != nil {
			t1, _ := traffic()
			trips[min(limit/4, 1)] += t1 - t0
		}
		if b.Failed() {
			b.FailNow()
		}
		return d
	}
	var one, four time.Duration
	var ratios []float64
	pair := 0
	for b.Loop() {
		for range throughputPairs {
			var d1, d4 time.Duration
			if pair%2 == 0 {
				d1, d4 = phase(1, pair), phase(4, pair)
			} else {
				d4, d1 = phase(4, pair), phase(1, pair)
			}
			one += d1
			four += d4
			ratios = append(ratios, float64(d1)/float64(d4))
			pair++
		}
	}
	slices.Sort(ratios)
	grants := float64(pair * throughputClients * throughputRounds)
	b.ReportMetric(grants/one.Seconds(), "limit1-grants/s")
	b.ReportMetric(grants/four.Seconds(), "limit4-grants/s")
	b.ReportMetric(median(ratios), "x-limit1")
	b.ReportMetric(ratios[0], "x-limit1-min")
	b.ReportMetric(ratios[len(ratios)-1], "x-limit1-max")
	b.ReportMetric(float64(one)/float64(four), "x-limit1-total")
	if cpuOK {
		b.ReportMetric(ms(cpu[0])/grants, "limit1-cpu-ms/grant")
		b.ReportMetric(ms(cpu[1])/grants, "limit4-cpu-ms/grant")
	}
	if traffic != nil {
		b.ReportMetric(float64(trips[0])/grants, "limit1-trips/grant")
		b.ReportMetric(float64(trips[1])/grants, "limit4-trips/grant")
	}
}

// median returns the median of sorted.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// renewalHeld is how many permits Renewal holds on one Locker: renewalKeys
// semaphores of renewalHeld/renewalKeys permits each.
const (
	renewalHeld = 10_000
	renewalKeys = 100
)

// Traffic reads the counters of a Locker's connections to its store: the
// round trips it started (pipelines, commands, RPC messages sent) and the
// bytes it sent and received.
type Traffic func() (trips, bytes int64)

// Renewal holds 10,000 permits on one Locker, which newLocker builds with
// the given observer, and measures the traffic of its renewal rounds, one
// round per iteration. It reports the round trips and bytes of a round,
// the permits a round renewed (renewed/round: 10,000 once the Locker's
// rounds take every permit together) and the bytes per permit renewed; the
// target is one round trip per round, and less than 1 KiB a permit.
//
// The rounds measured start after two renewal cycles: rounds that began
// once every permit was held and that renewed, together, as many permits
// as are held. The first sets up what later rounds save (etcd starts its
// key watches there); settle-trips are the round trips of the second.
// A Locker whose rounds stay split (taking the permits outlasted a renewal
// interval) is measured all the same, round by round.
//
// Renewal always ends: it fails, saying what it saw, when taking the
// permits takes more than 5 minutes, when no round ends for a minute, when
// the two cycles take more than 5 minutes, and when a renewal fails.
func Renewal(b *testing.B, newLocker func(locker.Observer) locker.Locker, traffic Traffic, key string) {
	renewal(b, newLocker, traffic, key, renewalBounds{take: 5 * time.Minute, round: time.Minute, settle: 5 * time.Minute})
}

// renewalBounds bound the waits of Renewal: for every permit to be taken,
// for each renewal round, and for the two cycles before the measured
// rounds.
type renewalBounds struct{ take, round, settle time.Duration }

func renewal(b *testing.B, newLocker func(locker.Observer) locker.Locker, traffic Traffic, key string, bounds renewalBounds) {
	rounds := make(chan locker.Event, 1024)
	l := newLocker(locker.ObserverFunc(func(e locker.Event) {
		if e.Kind == locker.EventRenewal && e.Count > 0 {
			select {
			case rounds <- e:
			default:
			}
		}
	}))
	held := take(b, l, key, bounds.take)
	heldAt := time.Now()
	b.Cleanup(func() {
		for _, p := range held {
			_ = p.Unlock(context.WithoutCancel(b.Context()))
		}
	})
	next := func() locker.Event {
		select {
		case e := <-rounds:
			if e.Failures > 0 {
				b.Fatalf("a renewal round failed %d of its %d renewals: the permits must stay held to be measured", e.Failures, e.Count)
			}
			return e
		case <-time.After(bounds.round):
			b.Fatalf("no renewal round ended within %v", bounds.round)
		}
		return locker.Event{}
	}
	// cycle waits for rounds that began at since or later to renew, in
	// all, as many permits as are held: every permit once, for a permit is
	// due again only a renewal interval after its last renewal.
	settleBy := time.Now().Add(bounds.settle)
	cycle := func(since time.Time, what string) {
		renewed, n := 0, 0
		for renewed < renewalHeld {
			if time.Now().After(settleBy) {
				b.Fatalf("%s: rounds since %v renewed %d of %d permits in %d rounds, past the bound of %v", what, since.Format(time.StampMilli), renewed, renewalHeld, n, bounds.settle)
			}
			if e := next(); !e.Start.Before(since) {
				renewed += e.Count
				n++
			}
		}
	}
	cycle(heldAt, "first renewal of every permit")
	settle, _ := traffic()
	cycle(time.Time{}, "second renewal of every permit")
	trips0, bytes0 := traffic()
	renewed, n := 0, 0
	for b.Loop() {
		renewed += next().Count
		n++
	}
	trips, bytes := traffic()
	trips, bytes = trips-trips0, bytes-bytes0
	b.ReportMetric(float64(trips0-settle), "settle-trips")
	b.ReportMetric(float64(renewed)/float64(n), "renewed/round")
	b.ReportMetric(float64(trips)/float64(n), "trips/round")
	b.ReportMetric(float64(bytes)/float64(n), "bytes/round")
	b.ReportMetric(float64(bytes)/float64(max(renewed, 1)), "bytes/permit")
}

// take takes Renewal's permits on l, 16 semaphores at a time, within
// bound.
func take(b *testing.B, l locker.Locker, key string, bound time.Duration) []locker.Lock {
	ctx, cancel := context.WithTimeout(b.Context(), bound)
	defer cancel()
	var wg sync.WaitGroup
	held := make(chan locker.Lock, renewalHeld)
	work := make(chan int, renewalKeys)
	for i := range renewalKeys {
		work <- i
	}
	close(work)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				sem, err := locker.NewSemaphore(l, fmt.Sprintf("%s/%03d", key, i), renewalHeld/renewalKeys)
				if err != nil {
					b.Error(err)
					return
				}
				for range renewalHeld / renewalKeys {
					p, err := sem.TryAcquire(ctx)
					if err != nil {
						b.Errorf("taking %d permits within %v: %v", renewalHeld, bound, err)
						return
					}
					held <- p
				}
			}
		})
	}
	wg.Wait()
	close(held)
	out := make([]locker.Lock, 0, renewalHeld)
	for p := range held {
		out = append(out, p)
	}
	if b.Failed() {
		for _, p := range out {
			_ = p.Unlock(context.WithoutCancel(b.Context()))
		}
		b.FailNow()
	}
	return out
}
