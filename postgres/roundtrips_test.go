package postgres_test

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/postgres"
)

// roundTrips is a pgx tracer that counts the statements a pool sends, a
// transaction's BEGIN and COMMIT included: one round trip each.
type roundTrips struct {
	mu  sync.Mutex
	n   int
	sql []string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.sql = append(r.sql, d.SQL)
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the statements counted so far, and forgets them.
func (r *roundTrips) take() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, sql := r.n, r.sql
	r.n, r.sql = 0, nil
	return n, sql
}

// TestTryLockFreedSharedKeyRoundTrips: a TryLock on a key whose row stayed
// marked as held by shared holds after the last one left costs one round
// trip more than on a free key (the settling), not a transaction of five
// and the acquiring statement again.
func TestTryLockFreedSharedKeyRoundTrips(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pc, err := pgxpool.ParseConfig(exampleURL)
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	pc.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l, err := postgres.New(pool, locker.WithPrefix(t.Name()+"-"+rand.Text()[:8]+"/"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, _ := locker.NewSemaphore(l, "k", 2)
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	releaseWhileLocked(ctx, t, pool, p)

	// The baseline, on a free key (its row made first, as k's is).
	free, err := l.TryLock(ctx, "free")
	if err != nil {
		t.Fatal(err)
	}
	if err := free.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rt.take()
	free, err = l.TryLock(ctx, "free")
	if err != nil {
		t.Fatal(err)
	}
	base, _ := rt.take()
	if err := free.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	rt.take()
	lk, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock of a key whose shared holds all left: %v", err)
	}
	n, sql := rt.take()
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("TryLock: %d round trips on a free key, %d on a freed key marked shared", base, n)
	if n > base+1 {
		t.Errorf("TryLock of a freed key marked shared took %d round trips, want at most %d (a free key's %d and the settling):\n%s", n, base+1, base, strings.Join(sql, "\n"))
	}
}
