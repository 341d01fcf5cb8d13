package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/sharetest"
	"github.com/golocker/locker/internal/storeenv"
)

const sharedTTL = 2 * time.Second

// sharedDriver returns a driver with a LISTEN connection on the test
// database, with a TTL of sharedTTL, a ctx for the test, and a free key.
func sharedDriver(t *testing.T) (notifyingDriver, context.Context, string) {
	return sharedDriverConns(t, 0)
}

// sharedDriverConns is sharedDriver on a pool of at most maxConns
// connections (0: pgxpool's default).
func sharedDriverConns(t *testing.T, maxConns int32) (notifyingDriver, context.Context, string) {
	return sharedDriverWith(t, func(pc *pgxpool.Config) {
		if maxConns > 0 {
			pc.MaxConns = maxConns
		}
	})
}

// sharedDriverWith is sharedDriver on a pool whose configuration set
// changed.
func sharedDriverWith(t *testing.T, set func(*pgxpool.Config)) (notifyingDriver, context.Context, string) {
	srv := storeenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	pc, err := pgxpool.ParseConfig(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	set(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return notifyingDriver{testDriver(ctx, t, newPoolQuerier(pool))}, ctx, fmt.Sprintf("shared-internal/%x", rand.Uint64())
}

// testDriver returns a driver on q with a TTL of sharedTTL, configured,
// closed when the test ends.
func testDriver(ctx context.Context, t *testing.T, q querier) *pgDriver {
	d := newDriver(q, Config{Table: DefaultTable}, nil)
	cfg := driver.Config{TTL: sharedTTL, Logger: slog.New(slog.DiscardHandler), Backoff: driver.Backoff(func(int) time.Duration { return 10 * time.Millisecond })}
	if err := d.Configure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestSharedWaiterTokenAfterLaterArrival: a waiter's token is the version
// of the statement that granted it, not the one that put it in line.
func TestSharedWaiterTokenAfterLaterArrival(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	sharetest.WaiterTokenAfterLaterArrival(ctx, t, d, key, sharedTTL)
}

// TestSubscribeSeesSharedRelease: the LISTEN connection wakes on a
// released permit.
func TestSubscribeSeesSharedRelease(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	sharetest.SubscribeSeesRelease(ctx, t, d, key, sharedTTL)
}

// TestSharedInspectAndBreak: Inspect lists a semaphore's holders, Break
// frees them.
func TestSharedInspectAndBreak(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	sharetest.InspectAndBreak(ctx, t, d, key, sharedTTL)
}

// TestSettleTakeSeesHoldAddedMeanwhile: settleTake takes a key's row
// marked as held by shared holds only when no hold is left, also one that
// a shared attempt added while the statement waited for the row: its
// snapshot predates that hold, and the row's version, which the attempt
// advanced, is what tells.
func TestSettleTakeSeesHoldAddedMeanwhile(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	holdAddedMeanwhile(ctx, t, d, key, "settleTake", func() (bool, error) {
		var taken sql.NullInt64
		var marked bool
		var now int64
		fence := time.Now().Add(time.Hour).UnixMicro()
		err := d.q.query(ctx, d.shared.settleTake, []any{key, "plain.owner", "plain", ttlMicros(sharedTTL), fence, dataArg(nil)},
			func(scan func(...any) error) error { return scan(&taken, &marked, &now) })
		return taken.Valid, err
	})
}

// TestMultiSettleSeesHoldAddedMeanwhile: TryAcquireMulti takes a key's row
// marked as held by shared holds only when no hold is left, also one that
// a shared attempt added while its settling statement waited for the row,
// as settleTake does.
func TestMultiSettleSeesHoldAddedMeanwhile(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	holdAddedMeanwhile(ctx, t, d, key, "TryAcquireMulti", func() (bool, error) {
		var reqs []driver.Request
		for _, k := range []string{key, key + "/other"} {
			reqs = append(reqs, driver.Request{Key: k, Owner: fmt.Sprintf("multi.%x", rand.Uint64()), TTL: sharedTTL})
		}
		grants, err := d.TryAcquireMulti(ctx, reqs)
		switch {
		case err == nil:
			return len(grants) > 0, nil
		case errors.Is(err, driver.ErrHeld), errors.Is(err, driver.ErrConflict):
			return false, nil
		}
		return false, err
	})
}

// holdAddedMeanwhile marks key's row as held by shared holds with none
// left, starts take, a plain acquisition of key, and, while take waits for
// the key's row, adds a live shared hold in a transaction that advances
// the row's version, as a shared attempt does. take reports whether it
// took the key, which it must not.
func holdAddedMeanwhile(ctx context.Context, t *testing.T, d notifyingDriver, key, name string, take func() (bool, error)) {
	t.Helper()
	pool := d.q.(poolQuerier).p
	tbl, stbl := quoteIdent(DefaultTable), quoteIdent(DefaultTable+sharedSuffix)
	// The row is marked, and no hold is left.
	if _, err := pool.Exec(ctx, "INSERT INTO "+tbl+" (task_name, task_status, version, owner_token, owner_label, lock_until, start_time, update_time)"+
		" VALUES ($1, 'RUNNING', 100, "+sharedOwnerSQL+", '"+sharedLabel+"', clock_timestamp() + interval '10 seconds', clock_timestamp(), clock_timestamp())", key); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DELETE FROM "+stbl+" WHERE task_name LIKE $1 || '%'", key)
		_, _ = pool.Exec(context.Background(), "DELETE FROM "+tbl+" WHERE task_name LIKE $1 || '%'", key)
	})
	// A shared attempt holds the row, advances its version, and adds a
	// hold: it commits once take waits for the row.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, stmt := range []string{
		"SELECT 1 FROM " + tbl + " WHERE task_name = $1 FOR UPDATE",
		"UPDATE " + tbl + " SET version = version + 1 WHERE task_name = $1",
		"INSERT INTO " + stbl + " (task_name, owner_token, mode, weight, share_limit, token, queued, kept, owner_label, lock_until, start_time)" +
			" VALUES ($1, 'holder', " + fmt.Sprint(int(driver.Permits)) + ", 1, 2, 101, 0, false, 'holder', clock_timestamp() + interval '10 seconds', clock_timestamp())",
	} {
		if _, err := tx.Exec(ctx, stmt, key); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		taken bool
		err   error
	}
	res := make(chan result, 1)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		var r result
		r.taken, r.err = take()
		res <- r
	}()
	awaitRowWait(ctx, t, pool, name, "WITH v AS MATERIALIZED%", returned)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.taken {
		t.Errorf("%s took the key while a shared hold added meanwhile held it", name)
	}
}

// awaitRowWait waits until a statement of name whose text is LIKE like
// (TryAcquireMulti's and settleTake's start "WITH v AS MATERIALIZED")
// waits for a row lock. It fails the test when returned, closed once name
// returned, closes first.
func awaitRowWait(ctx context.Context, t *testing.T, pool *pgxpool.Pool, name, like string, returned <-chan struct{}) {
	t.Helper()
	for {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1", like).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-returned:
			t.Fatalf("%s returned without waiting for the key's row", name)
		case <-ctx.Done():
			t.Fatalf("%s never waited for the key's row", name)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
