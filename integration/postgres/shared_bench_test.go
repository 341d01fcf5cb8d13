package postgres_test

import (
	"testing"

	"github.com/golocker/locker/integration/internal/sharedbench"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// sharedFleets runs bench on a fleet of direct Lockers on a pgx pool, on a
// *sql.DB and through PgBouncer in transaction mode, each a sub-benchmark.
func sharedFleets(b *testing.B, bench func(b *testing.B, f *fleet)) {
	srv := testenv.Postgres(b)
	run := func(url string, c client, cfg postgres.Config) func(b *testing.B) {
		return func(b *testing.B) {
			f := newFleet(b, url, c, cfg)
			f.direct = true
			bench(b, f)
		}
	}
	b.Run("Pool", run(srv.URL(), viaPool, postgres.Config{Table: "bench_locks"}))
	b.Run("SQLDB", run(srv.URL(), viaDB, postgres.Config{Table: "bench_sqldb_locks"}))
	b.Run("PgBouncer", func(b *testing.B) {
		run(testenv.NewPgBouncer(b, srv).URL(), viaPool, postgres.Config{Table: "bench_bouncer_locks", PollOnly: true})(b)
	})
}

// BenchmarkSharedUncontended: see sharedbench.Uncontended.
//
//	go test -run '^$' -bench SharedUncontended ./integration/postgres/
func BenchmarkSharedUncontended(b *testing.B) {
	sharedFleets(b, func(b *testing.B, f *fleet) {
		sharedbench.Uncontended(b, sharedbench.Closing(b, f.newLocker(b)), freshKey(b))
	})
}

// BenchmarkSharedHandoff: see sharedbench.Handoff.
func BenchmarkSharedHandoff(b *testing.B) {
	sharedFleets(b, func(b *testing.B, f *fleet) {
		sharedbench.Handoff(b, sharedbench.Closing(b, f.newLocker(b)), sharedbench.Closing(b, f.newLocker(b)), freshKey(b))
	})
}
