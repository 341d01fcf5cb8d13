package postgres_test

import (
	"testing"

	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// BenchmarkPostgres runs the conformance benchmarks (LockUnlock,
// TryLockHeld, Handoff with its p50, ParallelDistinctKeys) on a pgx pool
// with LISTEN wake-ups, polling, and through PgBouncer in transaction mode
// (run with -bench=Postgres).
func BenchmarkPostgres(b *testing.B) {
	srv := testenv.Postgres(b)
	run := func(url string, cfg postgres.Config) func(b *testing.B) {
		return func(b *testing.B) {
			f := newFleet(b, url, viaPool, cfg)
			f.direct = true
			conformance.RunBenchmarks(b, f.harness())
		}
	}
	b.Run("Suite", run(srv.URL(), postgres.Config{Table: "bench_locks"}))
	b.Run("SuitePollOnly", run(srv.URL(), postgres.Config{Table: "bench_poll_locks", PollOnly: true}))
	b.Run("SuitePgBouncer", func(b *testing.B) {
		run(testenv.NewPgBouncer(b, srv).URL(), postgres.Config{Table: "bench_bouncer_locks", PollOnly: true})(b)
	})
}
