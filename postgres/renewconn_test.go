package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/renewtest"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/postgres"
)

// starvedLoss returns lk's loss when no renewal came back in time
// (rerun.StarvedLoss: a round says nothing, and runs again), and nil
// otherwise.
func starvedLoss(lk locker.Lock) error {
	return rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal)
}

// TestRenewalNeedsNoNewConnection: a Locker renews its locks on a
// connection it keeps, so a renewal does not open one.
// database/sql closes idle connections past MaxIdleConns (2 by default): a
// renewal after a burst of acquisitions opened one, and under load the
// connect outlasted the lock's validity (CI: TestConformanceSQLDB/Scale
// lost a lock to "failed to connect ... context deadline exceeded").
// Here no connection of the *sql.DB stays idle, and new connections are
// refused once the lock is held. A lock lost only because no renewal came
// back in time (rerun.StarvedLoss) runs the round again, up to three
// rounds; a renewal that needed a connection fails with the refusal, and
// the round at once.
func TestRenewalNeedsNoNewConnection(t *testing.T) {
	const ttl = 2 * time.Second
	var refuse atomic.Bool
	afterConnect := func(context.Context, *pgx.Conn) error {
		if refuse.Load() {
			return errors.New("test: new connections refused")
		}
		return nil
	}
	handles := map[string]func(t *testing.T) (locker.Locker, error){
		"sql.DB": func(t *testing.T) (locker.Locker, error) {
			pc, err := pgx.ParseConfig(exampleURL)
			if err != nil {
				t.Fatal(err)
			}
			db := stdlib.OpenDB(*pc, stdlib.OptionAfterConnect(afterConnect))
			t.Cleanup(func() { _ = db.Close() })
			db.SetMaxIdleConns(0)
			return postgres.NewDBWithConfig(db, postgres.Config{PollOnly: true}, locker.WithTTL(ttl))
		},
		"pgxpool": func(t *testing.T) (locker.Locker, error) {
			pc, err := pgxpool.ParseConfig(exampleURL)
			if err != nil {
				t.Fatal(err)
			}
			pc.AfterConnect = afterConnect
			pool, err := pgxpool.NewWithConfig(t.Context(), pc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			return postgres.NewWithConfig(pool, postgres.Config{PollOnly: true}, locker.WithTTL(ttl))
		},
	}
	for name, open := range handles {
		t.Run(name, func(t *testing.T) {
			rerun.Starved(t, 3, func(int) error {
				refuse.Store(false)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				l, err := open(t)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				// Lock, not TryLock: with no idle connection each
				// statement dials, and under load a dial may outlast the
				// fence window, which a waiting Lock retries.
				lk, err := l.Lock(ctx, "renewconn-"+rand.Text())
				if err != nil {
					t.Fatal(err)
				}
				// On a pgx pool the first renewal opens the connection.
				if err := locker.Extend(ctx, lk); err != nil {
					if starved := starvedLoss(lk); starved != nil {
						return starved
					}
					t.Fatal(err)
				}
				refuse.Store(true)
				select {
				case <-lk.Done():
					if starved := starvedLoss(lk); starved != nil {
						return starved
					}
					t.Fatalf("the lock was lost while new connections were refused: %v", lk.Err())
				case <-time.After(2 * ttl):
				}
				refuse.Store(false)
				if err := lk.Unlock(ctx); err != nil {
					if starved := starvedLoss(lk); starved != nil {
						return starved
					}
					t.Fatal(err)
				}
				return nil
			})
		})
	}
}

// TestRenewalsDoNotWaitForTheCallersPool: the caller's own queries fill
// its pool (four of four connections in pg_sleep for longer than the
// TTL) while the database answers at once; the Locker's locks, permits
// and read holds must all be renewed, on a connection the caller's
// queries cannot take. On a *pgxpool.Pool every renewal waited for a
// pooled connection; on a *sql.DB the renewals of shared holds did.
func TestRenewalsDoNotWaitForTheCallersPool(t *testing.T) {
	const ttl = time.Second
	// Each handle: the caller's slow query, and how many of its
	// connections are in use.
	type handle struct {
		l     locker.Locker
		query func(ctx context.Context) error
		busy  func() int
	}
	const slow = "SELECT pg_sleep(3)"
	handles := map[string]func(t *testing.T) handle{
		"pgxpool": func(t *testing.T) handle {
			pool := testPool(t, exampleURL, func(pc *pgxpool.Config) { pc.MaxConns = 4 })
			return handle{
				l:     pollLocker(t, pool, locker.WithTTL(ttl)),
				query: func(ctx context.Context) error { _, err := pool.Exec(ctx, slow); return err },
				busy:  func() int { return int(pool.Stat().AcquiredConns()) },
			}
		},
		"sql.DB": func(t *testing.T) handle {
			db := testDB(t, exampleURL)
			db.SetMaxOpenConns(4) // the caller's queries take every one the Locker does not keep
			return handle{
				l:     pollLocker(t, db, locker.WithTTL(ttl)),
				query: func(ctx context.Context) error { _, err := db.ExecContext(ctx, slow); return err },
				busy:  func() int { return db.Stats().InUse },
			}
		},
	}
	for hname, mk := range handles {
		for _, hk := range renewtest.Holds {
			t.Run(hname+"/"+hk.Name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				h := mk(t)
				lk, err := hk.Try(ctx, h.l, "busypool-"+rand.Text())
				if err != nil {
					t.Fatal(err)
				}
				renewtest.KeptBesideBusyQueries(ctx, t, lk, hk.Name, ttl, 4, h.query, h.busy)
			})
		}
	}
}

// testPool opens a pgx pool on u, with the changes edit makes to its
// configuration, closed when t ends.
func testPool(t testing.TB, u string, edit func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(pc)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// testDB opens a *sql.DB on u with pgx's driver, closed when t ends.
func testDB(t testing.TB, u string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// pollLocker returns a PollOnly Locker on h, a *pgxpool.Pool or a
// *sql.DB, closed when t ends (before h).
func pollLocker(t testing.TB, h any, opts ...locker.Option) locker.Locker {
	t.Helper()
	var (
		l   locker.Locker
		err error
	)
	switch h := h.(type) {
	case *pgxpool.Pool:
		l, err = postgres.NewWithConfig(h, postgres.Config{PollOnly: true}, opts...)
	case *sql.DB:
		l, err = postgres.NewDBWithConfig(h, postgres.Config{PollOnly: true}, opts...)
	default:
		t.Fatalf("pollLocker: a handle of type %T", h)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// withAppName returns the test database's URL with application_name set,
// so that pg_stat_activity tells the handle's connections apart.
func withAppName(t *testing.T, name string) string {
	t.Helper()
	u, err := url.Parse(exampleURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// backends returns the pids of the server's sessions named app; with
// renewing, only those whose last statement was a renewal.
func backends(ctx context.Context, t *testing.T, admin *pgxpool.Pool, app string, renewing bool) []int32 {
	t.Helper()
	rows, err := admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1"+
		" AND (NOT $2 OR query LIKE 'UPDATE%unnest%') ORDER BY pid", app, renewing)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// TestRenewalReconnectsAtOnce: the server ends every session of the
// Locker's handle (pg_terminate_backend, as a restart or a pooler would);
// the next renewal, here an Extend, must not fail for it: it runs again
// on a new connection within the same call. A renewal that failed waited
// for the engine's retry, TTL/10 later, which again could meet a
// connection the server had ended.
func TestRenewalReconnectsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	admin := testPool(t, exampleURL, nil)
	handles := map[string]func(t *testing.T, u string) locker.Locker{
		"pgxpool": func(t *testing.T, u string) locker.Locker { return pollLocker(t, testPool(t, u, nil)) },
		"sql.DB":  func(t *testing.T, u string) locker.Locker { return pollLocker(t, testDB(t, u)) },
	}
	for name, open := range handles {
		t.Run(name, func(t *testing.T) {
			app := "reconnect_" + strings.ToLower(rand.Text()[:10])
			l := open(t, withAppName(t, app))
			lk, err := l.TryLock(ctx, "reconnect-"+rand.Text())
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := locker.Extend(ctx, lk); err != nil {
					t.Fatalf("Extend %d before the sessions ended: %v", i, err)
				}
				if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app); err != nil {
					t.Fatal(err)
				}
				for len(backends(ctx, t, admin, app, false)) > 0 {
					time.Sleep(5 * time.Millisecond)
				}
				if err := locker.Extend(ctx, lk); err != nil {
					t.Fatalf("an Extend after the server ended the handle's sessions must reconnect, not fail: %v", err)
				}
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRenewalConnectionHonoursMaxConnLifetime: on a *pgxpool.Pool the
// Locker's renewal connection, which lives outside the pool, is replaced
// once it is older than the pool's MaxConnLifetime, as the pool's own
// connections are (a proxy that cuts old connections would cut it).
func TestRenewalConnectionHonoursMaxConnLifetime(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	admin := testPool(t, exampleURL, nil)
	app := "lifetime_" + strings.ToLower(rand.Text()[:10])
	const lifetime = 300 * time.Millisecond
	pool := testPool(t, withAppName(t, app), func(pc *pgxpool.Config) {
		pc.MaxConnLifetime, pc.MaxConnLifetimeJitter = lifetime, 0
	})
	// The TTL keeps the Locker's own rounds away: only the Extends renew.
	l := pollLocker(t, pool, locker.WithTTL(time.Minute))
	lk, err := l.TryLock(ctx, "lifetime-"+rand.Text())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Unlock(ctx) }()
	if err := locker.Extend(ctx, lk); err != nil {
		t.Fatal(err)
	}
	first := backends(ctx, t, admin, app, true)
	if len(first) != 1 {
		t.Fatalf("want one session whose last statement renewed, got pids %v", first)
	}
	time.Sleep(2 * lifetime)
	if err := locker.Extend(ctx, lk); err != nil {
		t.Fatal(err)
	}
	// The pool's connections ran no renewal, so the first session was the
	// Locker's: it must end (the server may take a moment after the
	// client said goodbye).
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	for slices.Contains(backends(wctx, t, admin, app, false), first[0]) {
		select {
		case <-wctx.Done():
			t.Fatalf("the renewal connection (pid %d) outlived the pool's MaxConnLifetime %v", first[0], lifetime)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
