package postgres

import (
	"context"
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
	srv := storeenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := newStatements(DefaultTable)
	d := &pgDriver{q: newPoolQuerier(pool), cfg: Config{Table: DefaultTable}, sql: st, shared: newSharedStatements(DefaultTable, st), logger: slog.New(slog.DiscardHandler)}
	cfg := driver.Config{TTL: sharedTTL, Logger: slog.New(slog.DiscardHandler), Backoff: driver.Backoff(func(int) time.Duration { return 10 * time.Millisecond })}
	if err := d.Configure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return notifyingDriver{d}, ctx, fmt.Sprintf("shared-internal/%x", rand.Uint64())
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
