package postgres_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPgBouncerWithoutPollOnly: behind PgBouncer in transaction mode, a
// Locker left without Config.PollOnly finds that its LISTEN hears nothing,
// says so with a warning, and its waiters poll: they still get the key.
func TestPgBouncerWithoutPollOnly(t *testing.T) {
	srv := testenv.Postgres(t)
	url := testenv.NewPgBouncer(t, srv).URL()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool := openPool(t, url)
	cfg := postgres.Config{Table: "deaf_locks"}
	holder, err := postgres.NewWithConfig(pool, cfg, locker.WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter, err := postgres.NewWithConfig(pool, cfg, locker.WithTTL(testTTL), locker.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	key := freshKey(t)
	lk, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		lk2, err := waiter.Lock(ctx, key)
		if err == nil {
			err = lk2.Unlock(ctx)
		}
		got <- err
	}()
	// Let the waiter find the key held and try to subscribe.
	for !strings.Contains(logs.String(), "LISTEN hears no notifications") {
		select {
		case err := <-got:
			t.Fatalf("the waiter returned while the key was held: %v", err)
		case <-ctx.Done():
			t.Fatalf("no warning that LISTEN hears nothing behind PgBouncer; logs:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("a waiter whose LISTEN is deaf must still get the key by polling: %v", err)
	}
}
