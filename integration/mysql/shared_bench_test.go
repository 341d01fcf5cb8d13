package mysql_test

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/sharedbench"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
)

// BenchmarkSharedUncontended: see sharedbench.Uncontended (sem-x-lock and
// rlock-x-lock, target ≤ 1.3), with and without named-lock wake-ups; and,
// in the VsFloor runs, a permit against the raw floor (see benchSharedFloor).
func BenchmarkSharedUncontended(b *testing.B) {
	dsn := testenv.NewDatabase(b)
	for _, name := range []string{"Notify", "PollOnly"} {
		cfg := mysql.Config{PollOnly: name == "PollOnly"}
		b.Run(name, func(b *testing.B) {
			f := newFleet(b, dsn, cfg)
			f.direct = true
			sharedbench.Uncontended(b, sharedbench.Closing(b, f.newLocker(b)), "bench/"+rand.Text()[:8])
		})
		b.Run(name+"VsFloor", func(b *testing.B) { benchSharedFloor(b, dsn, cfg) })
	}
}

// BenchmarkSharedHandoff: see sharedbench.Handoff (permit-x-lock, target
// ≤ 2), with and without named-lock wake-ups; holder and waiter are
// Lockers of their own pools.
//
//	go test -run '^$' -bench SharedHandoff ./integration/mysql/
func BenchmarkSharedHandoff(b *testing.B) {
	dsn := testenv.NewDatabase(b)
	for _, name := range []string{"Notify", "PollOnly"} {
		b.Run(name, func(b *testing.B) {
			f := newFleet(b, dsn, mysql.Config{PollOnly: name == "PollOnly"})
			f.direct = true
			sharedbench.Handoff(b, sharedbench.Closing(b, f.newLocker(b)), sharedbench.Closing(b, f.newLocker(b)), "bench/"+rand.Text()[:8])
		})
	}
}

// BenchmarkSharedThroughput: see sharedbench.Throughput (x-limit1, limit 4
// ÷ limit 1); each client is a Locker of its own pool.
//
//	go test -run '^$' -bench SharedThroughput ./integration/mysql/
func BenchmarkSharedThroughput(b *testing.B) {
	f := newFleet(b, testenv.NewDatabase(b), mysql.Config{})
	f.direct = true
	sharedbench.Throughput(b, func() locker.Locker { return sharedbench.Closing(b, f.newLocker(b)) }, "bench/"+rand.Text()[:8])
}

// benchSharedFloor times, in turn, an uncontended permit of a semaphore
// (Acquire+Unlock), the same statements by hand (mysql.SQL's Hold and
// Leave, prepared on a pool of their own, on a key whose row exists), and
// a Lock+Unlock, so that all three see the same machine load.
// It reports sem-x-floor (ratio of medians, target ≤ 1.2), sem-x-floor-mean,
// sem-x-lock-p50 (ratio of medians, target ≤ 1.3) and the medians.
func benchSharedFloor(b *testing.B, dsn string, cfg mysql.Config) {
	ctx := b.Context()
	prefix := "bench-" + rand.Text()[:8] + "/"
	gdb, _ := openGorm(b, dsnConfig(b, dsn, ""))
	l, err := cfg.New(gdb, locker.WithTTL(10*time.Second), locker.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	sem, err := locker.NewSemaphore(l, "sem", 4)
	if err != nil {
		b.Fatal(err)
	}
	floorSem, err := locker.NewSemaphore(l, "floor", 4)
	if err != nil {
		b.Fatal(err)
	}
	// The floor's key has its row, from a permit that left.
	p, err := floorSem.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	_, raw := openGorm(b, dsnConfig(b, dsn, ""))
	stmts := mysql.SQL(mysql.DefaultTable)
	hold, err := raw.PrepareContext(ctx, stmts.Hold)
	if err != nil {
		b.Fatal(err)
	}
	defer hold.Close()
	leave, err := raw.PrepareContext(ctx, stmts.Leave)
	if err != nil {
		b.Fatal(err)
	}
	defer leave.Close()
	owner, ttl := rand.Text(), (10 * time.Second).Microseconds()
	// The statement's fence: an hour ahead (the server's clock is this
	// machine's), so that the floor never misses for it.
	fence := time.Now().Add(time.Hour).UnixMicro()
	floorOnce := func() {
		res, err := hold.ExecContext(ctx, owner, "floor", "1 1 4", ttl, prefix+"floor", fence)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			b.Fatalf("floor hold affected %d rows, want 1", n)
		}
		token, _ := res.LastInsertId()
		res, err = leave.ExecContext(ctx, prefix+"floor", owner, token)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			b.Fatalf("floor leave affected %d rows", n)
		}
	}
	once := func(take func() (locker.Lock, error)) {
		lk, err := take()
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	permitOnce := func() { once(func() (locker.Lock, error) { return sem.Acquire(ctx) }) }
	lockOnce := func() { once(func() (locker.Lock, error) { return l.Lock(ctx, "lock") }) }
	for range 50 { // warm the pools and statement caches
		floorOnce()
		permitOnce()
		lockOnce()
	}
	var floor, permit, lock []time.Duration
	for b.Loop() {
		t0 := time.Now()
		floorOnce()
		t1 := time.Now()
		permitOnce()
		t2 := time.Now()
		lockOnce()
		t3 := time.Now()
		floor, permit, lock = append(floor, t1.Sub(t0)), append(permit, t2.Sub(t1)), append(lock, t3.Sub(t2))
	}
	fm, pm, lm := median(floor), median(permit), median(lock)
	b.ReportMetric(float64(pm)/float64(fm), "sem-x-floor")
	b.ReportMetric(float64(mean(permit))/float64(mean(floor)), "sem-x-floor-mean")
	b.ReportMetric(float64(pm)/float64(lm), "sem-x-lock-p50")
	b.ReportMetric(float64(fm.Microseconds()), "floor-p50-us")
	b.ReportMetric(float64(pm.Microseconds()), "sem-p50-us")
	b.ReportMetric(float64(lm.Microseconds()), "lock-p50-us")
}
