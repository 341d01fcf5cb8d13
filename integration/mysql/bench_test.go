package mysql_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
)

// BenchmarkMySQL measures the backend against MariaDB (run with
// -bench=MySQL):
//
//   - LockUnlockVsFloor: an uncontended Lock+Unlock of a known key,
//     interleaved with the raw floor (the same conditional UPDATE and release
//     UPDATE as prepared statements through database/sql), so that both see
//     the same machine load; reports x-floor (ratio of medians, target
//     ≤ 1.3) and both medians.
//   - Suite and SuitePollOnly: the conformance benchmarks (LockUnlock,
//     TryLockHeld, Handoff with its p50, ParallelDistinctKeys) with and
//     without named-lock wake-ups (hand-off target ≤ 2 ms p50).
//   - Renew1000: one Locker holding 1,000 locks; reports the renewal
//     statements per renewal tick.
func BenchmarkMySQL(b *testing.B) {
	dsn := testenv.NewDatabase(b)
	b.Run("LockUnlockVsFloor", func(b *testing.B) { benchVsFloor(b, dsn) })
	b.Run("Suite", func(b *testing.B) {
		f := newFleet(b, dsn, mysql.Config{})
		f.direct = true
		conformance.RunBenchmarks(b, f.harness())
	})
	b.Run("SuitePollOnly", func(b *testing.B) {
		f := newFleet(b, dsn, mysql.Config{PollOnly: true})
		f.direct = true
		conformance.RunBenchmarks(b, f.harness())
	})
	b.Run("Renew1000", func(b *testing.B) { benchRenew(b, dsn, 1000) })
}

func benchVsFloor(b *testing.B, dsn string) {
	ctx := b.Context()
	gdb, _ := openGorm(b, dsnConfig(b, dsn, ""))
	l, err := mysql.New(gdb, locker.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })

	// The floor: its own pool, the same statements, prepared.
	_, raw := openGorm(b, dsnConfig(b, dsn, ""))
	acquire, err := raw.PrepareContext(ctx, mysql.SQL(mysql.DefaultTable).Acquire)
	if err != nil {
		b.Fatal(err)
	}
	defer acquire.Close()
	release, err := raw.PrepareContext(ctx, mysql.SQL(mysql.DefaultTable).Release)
	if err != nil {
		b.Fatal(err)
	}
	defer release.Close()
	const floorKey, key = "bench/floor", "bench/ours"
	owner, ttl := rand.Text(), (10 * time.Second).Microseconds()
	// The statements' fence: an hour ahead (the server's clock is this
	// machine's), so that the floor never misses for it.
	fence := time.Now().Add(time.Hour).UnixMicro()
	if _, err := raw.ExecContext(ctx, mysql.SQL(mysql.DefaultTable).Insert, floorKey, owner, "floor", nil, ttl, fence); err != nil {
		b.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, "UPDATE "+mysql.DefaultTable+" SET task_status = 'FINISH' WHERE task_name = ?", floorKey); err != nil {
		b.Fatal(err)
	}
	floorOnce := func() {
		res, err := acquire.ExecContext(ctx, owner, "floor", nil, ttl, floorKey, fence)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			b.Fatalf("floor acquire affected %d rows", n)
		}
		version, _ := res.LastInsertId()
		res, err = release.ExecContext(ctx, floorKey, owner, version)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			b.Fatalf("floor release affected %d rows", n)
		}
	}
	oursOnce := func() {
		lk, err := l.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for range 50 { // warm both pools and statement caches
		floorOnce()
		oursOnce()
	}
	var floor, ours []time.Duration
	for b.Loop() {
		t0 := time.Now()
		floorOnce()
		t1 := time.Now()
		oursOnce()
		t2 := time.Now()
		floor = append(floor, t1.Sub(t0))
		ours = append(ours, t2.Sub(t1))
	}
	fm, om := median(floor), median(ours)
	b.ReportMetric(float64(om)/float64(fm), "x-floor")
	b.ReportMetric(float64(mean(ours))/float64(mean(floor)), "x-floor-mean")
	b.ReportMetric(float64(fm.Microseconds()), "floor-p50-us")
	b.ReportMetric(float64(om.Microseconds()), "ours-p50-us")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// benchRenew holds n locks on one Locker for three TTLs and counts the
// renewal statements the database receives per renewal round.
func benchRenew(b *testing.B, dsn string, n int) {
	const ttl = 1500 * time.Millisecond
	var rec recorder
	gdb, _ := openRecorded(b, dsnConfig(b, dsn, ""), &rec)
	l, err := mysql.New(gdb, locker.WithTTL(ttl), locker.WithPrefix(fmt.Sprintf("renew%d/", time.Now().UnixNano())))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	locks := make([]locker.Lock, n)
	for i := range locks {
		if locks[i], err = l.TryLock(ctx, fmt.Sprint("k", i)); err != nil {
			b.Fatal(err)
		}
	}
	rec.take()
	time.Sleep(3 * ttl)
	es := rec.take()
	for _, lk := range locks {
		if lk.Err() != nil {
			b.Fatalf("lock lost while holding: %v", lk.Err())
		}
	}
	renewPrefix := "UPDATE `" + mysql.DefaultTable + "` SET lock_until"
	updates := count(es, renewPrefix)
	selects := count(es, "SELECT task_name, owner_token, version FROM")
	// A round is a burst of renewal statements; rounds are TTL/3 apart.
	rounds := 0
	var last time.Time
	for _, e := range es {
		if e.prepare || !strings.HasPrefix(e.query, renewPrefix) {
			continue
		}
		if e.at.Sub(last) > ttl/10 {
			rounds++
		}
		last = e.at
	}
	if rounds == 0 {
		b.Fatal("no renewal round seen")
	}
	b.ReportMetric(float64(updates+selects)/float64(rounds), "renew-stmts/tick")
	b.ReportMetric(float64(rounds), "ticks")
	b.ReportMetric(float64(n), "locks")
	for _, lk := range locks {
		_ = lk.Unlock(ctx)
	}
}
