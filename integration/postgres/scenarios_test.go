package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	neturl "net/url"
	"testing"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/lib/pq" // pglock's driver

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// scenarioTTL is the TTL of every implementation in the scenarios: long
// enough that no renewal runs during a hand-off.
const scenarioTTL = 10 * time.Second

// bouncerPoll is the poll interval of this library through PgBouncer: the
// floor's and pglock's.
const bouncerPoll = time.Millisecond

// BenchmarkScenarios runs the scenarios of package contend on one
// PostgreSQL database: this library with LISTEN wake-ups ("locker") and
// polling ("poll"), beside the raw floor (the Locker's own acquire and
// release statements by hand through a pgx pool, the acquire retried every
// millisecond) and cirello.io/pglock, the peer, retried every millisecond
// with FailIfLocked (its own AcquireContext sleeps a whole lease between
// tries). Each client has a pool of its own:
//
//	go test -run '^$' -bench Scenarios ./integration/postgres/
func BenchmarkScenarios(b *testing.B) {
	srv := testenv.Postgres(b)
	contend.Scenarios(b, scenarioImpls(b, srv.URL(), "scen", false), 3*time.Second)
}

// BenchmarkScenariosPgBouncer runs the scenarios through PgBouncer in
// transaction pooling mode: this library polling every millisecond
// (locker.ConstantBackoff), as the floor and pglock do, the floor and
// pglock.
func BenchmarkScenariosPgBouncer(b *testing.B) {
	srv := testenv.Postgres(b)
	bouncer := testenv.NewPgBouncer(b, srv)
	contend.Scenarios(b, scenarioImpls(b, bouncer.URL(), "scen_bouncer", true), 3*time.Second)
}

// scenarioImpls returns the implementations of the scenarios on url, this
// library's on table prefix+"_locks", pglock's on prefix+"_pglock".
func scenarioImpls(b *testing.B, url, prefix string, bouncer bool) []contend.Impl {
	table := prefix + "_locks"
	newLocker := func(cfg postgres.Config, opts ...locker.Option) func(b *testing.B) locker.Locker {
		cfg.Table = table
		opts = append([]locker.Option{locker.WithTTL(scenarioTTL)}, opts...)
		return func(b *testing.B) locker.Locker {
			l, err := postgres.NewWithConfig(openPool(b, url), cfg, opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}
	}
	// The table exists once a Locker has run its migration.
	if err := newLocker(postgres.Config{PollOnly: true})(b).Close(); err != nil {
		b.Fatal(err)
	}
	if err := newPglock(b, url, prefix+"_pglock").TryCreateTable(); err != nil {
		b.Fatal(err)
	}
	var impls []contend.Impl
	if !bouncer {
		impls = append(impls, contend.Locker(newLocker(postgres.Config{})))
	}
	poll := contend.Locker(newLocker(postgres.Config{PollOnly: true}))
	poll.Name = "poll"
	if bouncer {
		poll = contend.Locker(newLocker(postgres.Config{PollOnly: true}, locker.WithBackoff(locker.ConstantBackoff(bouncerPoll))))
	}
	impls = append(impls, poll,
		contend.Impl{Name: "floor", New: func(b *testing.B, key string) contend.Mutex {
			return floorMutex(b, openPool(b, url), table, key)
		}},
		contend.Impl{Name: "pglock", New: func(b *testing.B, key string) contend.Mutex {
			return pglockMutex(b, url, prefix+"_pglock", key)
		}})
	return impls
}

// floorMutex is the raw floor on key: the Locker's acquire statement,
// retried every millisecond until it takes the row, and its release.
func floorMutex(b *testing.B, pool *pgxpool.Pool, table, key string) contend.Mutex {
	stmts := postgres.SQL(table)
	ttl := scenarioTTL.Microseconds()
	return contend.Func(func(ctx context.Context) (func(context.Context) error, error) {
		owner := rand.Text()
		for {
			// The fence: a day ahead (the server's clock is this
			// machine's), so that the floor never misses for it.
			fence := time.Now().Add(24 * time.Hour).UnixMicro()
			var (
				token, remaining sql.NullInt64
				now              int64
			)
			err := pool.QueryRow(ctx, stmts.Acquire, key, owner, "floor", ttl, fence).Scan(&token, &remaining, &now)
			if err != nil {
				return nil, err
			}
			if token.Valid {
				return func(ctx context.Context) error {
					n, err := countRows(ctx, pool, stmts.Release, key, owner, token.Int64, table)
					if err != nil {
						return err
					}
					if n != 1 {
						return fmt.Errorf("floor release of %s freed %d rows", key, n)
					}
					return nil
				}, nil
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	})
}

// countRows runs query on pool and returns how many rows it returned.
func countRows(ctx context.Context, pool *pgxpool.Pool, query string, args ...any) (int, error) {
	rows, err := pool.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	return n, rows.Err()
}

// newPglock returns a cirello.io/pglock client on table with a lib/pq
// pool of its own.
func newPglock(b *testing.B, rawURL, table string) *pglock.Client {
	// lib/pq sends parameters it does not know to the server, and
	// PgBouncer refuses pgx's. Through PgBouncer in transaction mode lib/pq
	// needs binary_parameters: it then sends each statement in one go.
	u, err := neturl.Parse(rawURL)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	if q.Has("default_query_exec_mode") {
		q.Del("default_query_exec_mode")
		q.Set("binary_parameters", "yes")
	}
	u.RawQuery = q.Encode()
	db, err := sql.Open("postgres", u.String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	c, err := pglock.New(db, pglock.WithCustomTable(table),
		pglock.WithLeaseDuration(scenarioTTL), pglock.WithHeartbeatFrequency(scenarioTTL/3))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// pglockMutex is cirello.io/pglock on key, a client of its own.
func pglockMutex(b *testing.B, url, table, key string) contend.Mutex {
	c := newPglock(b, url, table)
	return contend.Func(func(ctx context.Context) (func(context.Context) error, error) {
		for {
			lk, err := c.AcquireContext(ctx, key, pglock.FailIfLocked())
			if errors.Is(err, pglock.ErrNotAcquired) && ctx.Err() == nil {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(time.Millisecond):
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return c.ReleaseContext(ctx, lk) }, nil
		}
	})
}
