package postgres_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
		n, err := countRows(ctx, pool, stmts.Leave, key, owner, table, token)
		if err != nil {
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

// BenchmarkSharedRenewal: see sharedbench.Renewal, on a pgx pool. A round
// trip is a statement the pool's connections send (pgx sends each in one
// write and waits for its reply); the bytes are those of its connections,
// both ways. The TTL is 10 s so that, on a loaded machine, taking the
// 10,000 permits fits in one renewal interval and a round renews them all
// (with a shorter TTL the rounds stay split, which Renewal reports).
//
//	go test -run '^$' -bench SharedRenewal -benchtime 1x ./integration/postgres/
func BenchmarkSharedRenewal(b *testing.B) {
	srv := testenv.Postgres(b)
	var t traffic
	pc, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	pc.ConnConfig.Tracer = &t
	pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, t: &t}, nil
	}
	pool, err := pgxpool.NewWithConfig(b.Context(), pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	sharedbench.Renewal(b, func(o locker.Observer) locker.Locker {
		l, err := postgres.NewWithConfig(pool, postgres.Config{Table: "bench_locks"},
			locker.WithTTL(10*time.Second), locker.WithPrefix("bench-renewal/"), locker.WithObserver(o))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}, func() (int64, int64) { return t.trips.Load(), t.bytes.Load() }, freshKey(b))
}

// traffic counts the statements a pgx pool sends (pgx.QueryTracer) and the
// bytes of its connections.
type traffic struct{ trips, bytes atomic.Int64 }

func (t *traffic) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.trips.Add(1)
	return ctx
}

func (t *traffic) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countingConn adds the bytes it reads and writes to t.
type countingConn struct {
	net.Conn
	t *traffic
}

func (c *countingConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.t.bytes.Add(int64(k))
	return k, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	k, err := c.Conn.Write(p)
	c.t.bytes.Add(int64(k))
	return k, err
}
