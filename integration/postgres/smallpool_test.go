package postgres_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// TestSmallSQLPool: a *sql.DB limited to one connection has no room for a
// LISTEN connection; the Locker polls instead of starving its statements
// (which would fail the LISTEN self-test, and log it).
func TestSmallSQLPool(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool := openPool(t, testenv.Postgres(t).URL())
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	db.SetMaxOpenConns(1)
	cfg := postgres.Config{Table: "small_pool_locks"}
	a, err := postgres.NewDBWithConfig(db, cfg, locker.WithTTL(testTTL), locker.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := postgres.NewDBWithConfig(db, cfg, locker.WithTTL(testTTL), locker.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	key := freshKey(t)
	lk, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		lk2, err := b.Lock(ctx, key)
		if err == nil {
			err = lk2.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(testTTL / 2)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a one-connection pool and a waiter: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter on a one-connection pool: %v", err)
	}
	if w := logs.String(); w != "" {
		t.Errorf("a one-connection pool must poll without trying LISTEN; warnings:\n%s", w)
	}
}
