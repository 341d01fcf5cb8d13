package postgres_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
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

// BenchmarkSharedUncontended: see sharedbench.Uncontended; and, in the
// VsFloor runs, a permit against the raw floor (see benchSharedFloor).
//
//	go test -run '^$' -bench SharedUncontended ./integration/postgres/
func BenchmarkSharedUncontended(b *testing.B) {
	sharedFleets(b, func(b *testing.B, f *fleet) {
		sharedbench.Uncontended(b, sharedbench.Closing(b, f.newLocker(b)), freshKey(b))
	})
	srv := testenv.Postgres(b)
	b.Run("PoolVsFloor", func(b *testing.B) {
		cfg := postgres.Config{Table: "bench_locks"}
		f := newFleet(b, srv.URL(), viaPool, cfg)
		f.direct = true
		benchSharedFloor(b, sharedbench.Closing(b, f.newLocker(b)), openPool(b, srv.URL()), cfg.Table)
	})
}

// benchSharedFloor runs sharedbench.VsFloor on l with, as the floor,
// postgres.SQL's Hold and Leave for a permit of a semaphore of 4, sent on
// pool (a pgx pool of its own, which prepares and caches them as l's does).
func benchSharedFloor(b *testing.B, l locker.Locker, pool *pgxpool.Pool, table string) {
	stmts := postgres.SQL(table)
	key, owner, ttl := freshKey(b)+"/floor", rand.Text(), (10 * time.Second).Microseconds()
	sharedbench.VsFloor(b, l, freshKey(b), func(ctx context.Context) error {
		// The fence: a day ahead (the server's clock is this machine's),
		// so that the floor never misses for it.
		fence := time.Now().Add(24 * time.Hour).UnixMicro()
		var token int64
		if err := pool.QueryRow(ctx, stmts.Hold, key, owner, "floor", ttl, fence, int16(driver.Permits), 1, 4).Scan(&token); err != nil {
			return fmt.Errorf("floor hold: %w", err)
		}
		rows, err := pool.Query(ctx, stmts.Leave, key, owner, table, token)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("floor leave of %s deleted %d holds, want 1", key, n)
		}
		return nil
	})
}

// BenchmarkSharedHandoff: see sharedbench.Handoff.
func BenchmarkSharedHandoff(b *testing.B) {
	sharedFleets(b, func(b *testing.B, f *fleet) {
		sharedbench.Handoff(b, sharedbench.Closing(b, f.newLocker(b)), sharedbench.Closing(b, f.newLocker(b)), freshKey(b))
	})
}
