package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/golocker/locker"
	"github.com/golocker/locker/postgres"
)

// TestRenewalNeedsNoNewConnection: a Locker on a *sql.DB renews its locks
// on a connection it keeps, so a renewal does not open one. database/sql
// closes idle connections past MaxIdleConns (2 by default): a renewal
// after a burst of acquisitions opened one, and under load the connect
// outlasted the lock's validity (CI: TestConformanceSQLDB/Scale lost a
// lock to "failed to connect ... context deadline exceeded"). Here no
// connection stays idle, and new ones are refused once the lock is held.
func TestRenewalNeedsNoNewConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pc, err := pgx.ParseConfig(exampleURL)
	if err != nil {
		t.Fatal(err)
	}
	var refuse atomic.Bool
	var connects atomic.Int64
	db := stdlib.OpenDB(*pc, stdlib.OptionAfterConnect(func(context.Context, *pgx.Conn) error {
		if refuse.Load() {
			return errors.New("test: new connections refused")
		}
		connects.Add(1)
		return nil
	}))
	defer db.Close()
	db.SetMaxIdleConns(0)
	const ttl = 2 * time.Second
	l, err := postgres.NewDBWithConfig(db, postgres.Config{PollOnly: true}, locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lk, err := l.Lock(ctx, "renewconn-"+rand.Text())
	if err != nil {
		t.Fatal(err)
	}
	// An Extend renews like a round; once one ran on a kept connection
	// (no connect), the renewals need no new one.
	for range 20 {
		n := connects.Load()
		if err := locker.Extend(ctx, lk); err != nil {
			t.Fatal(err)
		}
		if connects.Load() == n {
			break
		}
	}
	refuse.Store(true)
	select {
	case <-lk.Done():
		t.Fatalf("the lock was lost while new connections were refused: %v", lk.Err())
	case <-time.After(2 * ttl):
	}
	refuse.Store(false)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
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
	type handle struct {
		new  func(t *testing.T) (locker.Locker, func(ctx context.Context) error)
		busy func() int // the caller's connections in use
	}
	handles := map[string]func(t *testing.T) handle{
		"pgxpool": func(t *testing.T) handle {
			pc, err := pgxpool.ParseConfig(exampleURL)
			if err != nil {
				t.Fatal(err)
			}
			pc.MaxConns = 4
			pool, err := pgxpool.NewWithConfig(t.Context(), pc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			return handle{
				new: func(t *testing.T) (locker.Locker, func(ctx context.Context) error) {
					l, err := postgres.NewWithConfig(pool, postgres.Config{PollOnly: true}, locker.WithTTL(ttl))
					if err != nil {
						t.Fatal(err)
					}
					return l, func(ctx context.Context) error { _, err := pool.Exec(ctx, "SELECT pg_sleep(3)"); return err }
				},
				busy: func() int { return int(pool.Stat().AcquiredConns()) },
			}
		},
		"sql.DB": func(t *testing.T) handle {
			db, err := sql.Open("pgx", exampleURL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			db.SetMaxOpenConns(4) // the caller's queries take every one the Locker does not keep
			return handle{
				new: func(t *testing.T) (locker.Locker, func(ctx context.Context) error) {
					l, err := postgres.NewDBWithConfig(db, postgres.Config{PollOnly: true}, locker.WithTTL(ttl))
					if err != nil {
						t.Fatal(err)
					}
					return l, func(ctx context.Context) error { _, err := db.ExecContext(ctx, "SELECT pg_sleep(3)"); return err }
				},
				busy: func() int { return db.Stats().InUse },
			}
		},
	}
	holds := map[string]func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error){
		"lock": func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error) {
			return l.TryLock(ctx, key)
		},
		"permit": func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error) {
			s, err := locker.NewSemaphore(l, key, 2)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(ctx)
		},
		"read hold": func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error) {
			m, err := locker.NewRWMutex(l, key)
			if err != nil {
				return nil, err
			}
			return m.TryRLock(ctx)
		},
	}
	for hname, mk := range handles {
		for kind, hold := range holds {
			t.Run(hname+"/"+kind, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				h := mk(t)
				l, query := h.new(t)
				defer l.Close()
				lk, err := hold(ctx, l, "busypool-"+rand.Text())
				if err != nil {
					t.Fatal(err)
				}
				// One renewal before the pool fills: a connection taken at
				// the first renewal counts as the Locker's own.
				if err := locker.Extend(ctx, lk); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						if err := query(ctx); err != nil {
							t.Errorf("the caller's query: %v", err)
						}
					})
				}
				for h.busy() < 4 {
					time.Sleep(5 * time.Millisecond)
				}
				select {
				case <-lk.Done():
					t.Errorf("the %s was lost while the caller's queries held every pooled connection: %v", kind, lk.Err())
				case <-time.After(5 * ttl / 2):
				}
				wg.Wait()
				if err := lk.Unlock(ctx); err != nil && lk.Err() == nil {
					t.Fatal(err)
				}
			})
		}
	}
}
