package postgres_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// freshKey returns a key no earlier run used.
func freshKey(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return t.Name() + "-" + hex.EncodeToString(b[:])
}

// withParam returns rawURL with the query parameter name=value.
func withParam(t testing.TB, rawURL, name, value string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// warm opens every connection pool may hold, retrying set-ups that time
// out until ctx ends.
func warm(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for int32(len(conns)) < pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("opening the pool's connections: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		conns = append(conns, c)
	}
}

// newLockers makes n Lockers on one pool.
func newLockers(t *testing.T, pool *pgxpool.Pool, n int, cfg postgres.Config) []locker.Locker {
	t.Helper()
	ls := make([]locker.Locker, n)
	for i := range ls {
		l, err := postgres.NewWithConfig(pool, cfg, locker.WithTTL(5*time.Second))
		if err != nil {
			t.Fatalf("postgres.New: %v", err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ls[i] = l
	}
	return ls
}

// raceFirstInsert has every Locker TryLock the same fresh keys at once, and
// fails unless exactly one of them gets each key and the others are told
// ErrNotAcquired.
//
// With a pool, every round starts with all of its connections open (warm),
// so that the race is between statements, not connection set-ups: under
// load a set-up outlasts its timeout, which is an outage, not a race.
func raceFirstInsert(t *testing.T, pool *pgxpool.Pool, ls []locker.Locker, rounds int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for range rounds {
		if pool != nil {
			warm(ctx, t, pool)
		}
		key := freshKey(t)
		var (
			wg      sync.WaitGroup
			granted atomic.Int32
			mu      sync.Mutex
			held    []locker.Lock
		)
		start := make(chan struct{})
		for _, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				lk, err := l.TryLock(ctx, key)
				switch {
				case err == nil:
					granted.Add(1)
					mu.Lock()
					held = append(held, lk)
					mu.Unlock()
				case !errors.Is(err, locker.ErrNotAcquired):
					t.Errorf("a contender must be told ErrNotAcquired, got %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := granted.Load(); n < 1 {
			t.Fatalf("no contender racing the first insert of a key was granted it; exactly one must be")
		}
		// A grant that came so late (a loaded machine) that its hold
		// expired before its TryLock returned may be followed by another:
		// every grant but the newest must have ended by then, its Done
		// closed, since the store gave the key away.
		slices.SortFunc(held, func(a, b locker.Lock) int { return cmp.Compare(a.Token(), b.Token()) })
		for _, lk := range held[:len(held)-1] {
			if time.Now().Before(lk.Deadline()) {
				t.Fatalf("%d contenders racing the first insert of a key were granted it, token %d valid until %v beside token %d; exactly one may hold it", len(held), lk.Token(), lk.Deadline(), held[len(held)-1].Token())
			}
			select {
			case <-lk.Done():
			case <-time.After(time.Second): // its timer's lag, at most
				t.Fatalf("token %d's deadline %v passed and token %d was granted, but its Done is open", lk.Token(), lk.Deadline(), held[len(held)-1].Token())
			}
		}
		for _, lk := range held {
			if err := lk.Unlock(ctx); err != nil {
				t.Errorf("Unlock: %v", err)
			}
		}
	}
}

// TestConcurrentFirstInsert races 200 Lockers for fresh keys.
func TestConcurrentFirstInsert(t *testing.T) {
	pool := openPool(t, withParam(t, testenv.Postgres(t).URL(), "pool_max_conns", "40"))
	raceFirstInsert(t, pool, newLockers(t, pool, 200, postgres.Config{Table: "race_locks", PollOnly: true}), 5)
}

// TestSerializable races Lockers whose sessions default to SERIALIZABLE:
// serialization failures are retried inside the attempt, and never reach
// the caller as anything but ErrNotAcquired.
func TestSerializable(t *testing.T) {
	u := withParam(t, testenv.Postgres(t).URL(), "default_transaction_isolation", "serializable")
	pool := openPool(t, withParam(t, u, "pool_max_conns", "40"))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var iso string
	if err := pool.QueryRow(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil || iso != "serializable" {
		t.Fatalf("the pool's sessions must be serializable: %q, %v", iso, err)
	}
	raceFirstInsert(t, pool, newLockers(t, pool, 50, postgres.Config{Table: "serializable_locks", PollOnly: true}), 10)
}

// TestForgedNotify: any role may NOTIFY the lock channel; a notification
// wakes a waiter, which then finds the key held: it grants nothing. A
// round in which the holder lost its lock because no renewal came back in
// time (rerun.StarvedLoss: a loaded machine) says nothing, since the key
// was then free for the waiter, and runs again, up to three rounds
// (docs/design.md, "Tests on a loaded machine").
func TestForgedNotify(t *testing.T) {
	srv := testenv.Postgres(t)
	admin := openPool(t, srv.URL())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, "DO $$ BEGIN CREATE ROLE forger LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$"); err != nil {
		t.Fatalf("create role: %v", err)
	}
	fu, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	fu.User = url.User("forger")
	forger := openPool(t, fu.String())
	const table = "forged_locks"
	ls := newLockers(t, openPool(t, srv.URL()), 2, postgres.Config{Table: table})
	rerun.Starved(t, 3, func(int) error { return forgedNotify(ctx, t, forger, table, ls) })
}

// forgedNotify is one round of TestForgedNotify. It returns the holder's
// loss to renewals that never came back, and fails t on any other fault.
func forgedNotify(ctx context.Context, t *testing.T, forger *pgxpool.Pool, table string, ls []locker.Locker) error {
	key := freshKey(t)
	lk, err := ls[0].TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	defer lk.Unlock(ctx)

	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for _, payload := range []string{key, ""} {
				if _, err := forger.Exec(ctx, "SELECT pg_notify($1, $2)", table, payload); err != nil {
					t.Errorf("forged notify: %v", err)
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	got, err := ls[1].Lock(wctx, key)
	close(stop)
	wg.Wait()
	if err == nil {
		_ = got.Unlock(ctx)
	}
	if starved := rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal); starved != nil {
		return starved
	}
	if err == nil {
		t.Fatalf("a forged NOTIFY must never grant a held key; Lock returned it")
	}
	if !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the wait must end with its ctx: %v", err)
	}
	select {
	case <-lk.Done():
		t.Fatalf("the holder lost its lock: %v", lk.Err())
	default:
	}
	return nil
}

// TestHolderSurvivesTerminatedBackends: no lock state lives in a session,
// so terminating every connection of the holder's pool (a failover, a
// pooler recycling connections) loses nothing while renewals get through.
// A renewal that meets a terminated backend runs again on a new
// connection. A round in which the lock was lost only because no renewal
// came back in time (rerun.StarvedLoss: the last failure, if any, a
// timeout) says nothing, and runs again, up to three rounds; a loss to a
// refused renewal, or to one that failed on a terminated backend, fails at
// once.
func TestHolderSurvivesTerminatedBackends(t *testing.T) {
	srv := testenv.Postgres(t)
	admin := openPool(t, srv.URL())
	pool := openPool(t, withParam(t, srv.URL(), "application_name", "terminated_holder"))
	l, err := postgres.NewWithConfig(pool, postgres.Config{Table: "terminated_locks"}, locker.WithTTL(testTTL))
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	terminate := func() {
		t.Helper()
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'terminated_holder'"); err != nil {
			t.Fatalf("terminate: %v", err)
		}
	}
	rerun.Starved(t, 3, func(int) error {
		lk, err := l.TryLock(ctx, freshKey(t))
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		for end := time.Now().Add(3 * testTTL); time.Now().Before(end); {
			terminate()
			select {
			case <-lk.Done():
				if starved := rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal); starved != nil {
					return starved
				}
				t.Fatalf("a holder whose connections are terminated must keep its lock while renewals get through: %v", lk.Err())
			case <-time.After(testTTL / 5):
			}
		}
		// Unlock at once on a pool whose idle connections were just ended:
		// the release must not fail for a connection the server had closed.
		terminate()
		time.Sleep(200 * time.Millisecond) // the backends exit; the pool pings only connections idle for 1 s
		if err := lk.Unlock(ctx); err != nil {
			if starved := rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal); starved != nil {
				return starved
			}
			t.Fatalf("Unlock: %v", err)
		}
		return nil
	})
}

// TestHolderSurvivesRecycledPool holds a lock on a pool whose connections
// live a fraction of a second (MaxConnLifetime): nothing is lost. A round
// in which the lock was lost only because no renewal came back in time
// (rerun.StarvedLoss) says nothing, and runs again, up to three rounds;
// any other loss fails at once.
func TestHolderSurvivesRecycledPool(t *testing.T) {
	pc, err := pgxpool.ParseConfig(testenv.Postgres(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConnLifetime, pc.MaxConnLifetimeJitter, pc.HealthCheckPeriod = 200*time.Millisecond, 0, 100*time.Millisecond
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l, err := postgres.NewWithConfig(pool, postgres.Config{Table: "recycled_locks"}, locker.WithTTL(testTTL))
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	rerun.Starved(t, 3, func(int) error {
		lk, err := l.TryLock(ctx, freshKey(t))
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		select {
		case <-lk.Done():
			if starved := rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal); starved != nil {
				return starved
			}
			t.Fatalf("a holder on a recycling pool must keep its lock: %v", lk.Err())
		case <-time.After(3 * testTTL):
		}
		if err := lk.Unlock(ctx); err != nil {
			if starved := rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal); starved != nil {
				return starved
			}
			t.Fatalf("Unlock: %v", err)
		}
		return nil
	})
}

// TestGuard: a transaction guarded by a lock that another holder took over
// (ForceUnlock, then TryLock) fails with ErrLost, on pgx and database/sql.
func TestGuard(t *testing.T) {
	srv := testenv.Postgres(t)
	pool := openPool(t, srv.URL())
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ls := newLockers(t, pool, 2, postgres.Config{Table: "guard_locks"})
	key := freshKey(t)
	lk, err := ls[0].TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	guards := map[string]func() error{
		"pgx": func() error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			return postgres.Guard(ctx, tx, lk)
		},
		"sql": func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			return postgres.GuardSQL(ctx, tx, lk)
		},
	}
	for name, g := range guards {
		if err := g(); err != nil {
			t.Errorf("%s: Guard of a held lock: %v", name, err)
		}
	}
	if err := locker.ForceUnlock(ctx, ls[1], key); err != nil {
		t.Fatalf("ForceUnlock: %v", err)
	}
	lk2, err := ls[1].TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after ForceUnlock: %v", err)
	}
	defer lk2.Unlock(ctx)
	for name, g := range guards {
		if err := g(); !errors.Is(err, locker.ErrLost) {
			t.Errorf("%s: Guard of a lock taken over must fail with ErrLost: %v", name, err)
		}
	}
	if err := postgres.Guard(ctx, nil, lk2); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("Guard without a transaction must fail with ErrInvalidOption: %v", err)
	}
}

// TestNewRefuses bad arguments with ErrInvalidOption naming them.
func TestNewRefuses(t *testing.T) {
	if _, err := postgres.New(nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("New(nil) = %v; want ErrInvalidOption", err)
	}
	if _, err := postgres.NewDB(nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("NewDB(nil) = %v; want ErrInvalidOption", err)
	}
	pool := openPool(t, testenv.Postgres(t).URL())
	_, err := postgres.NewWithConfig(pool, postgres.Config{Table: `x"; DROP TABLE y; --`})
	if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "Config.Table") {
		t.Errorf("a bad table name must fail with ErrInvalidOption naming Config.Table: %v", err)
	}
}
