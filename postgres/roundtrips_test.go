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
	l, rt, ctx := freedKeyLocker(t)

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

// TestTryLockMultiFreedSharedKeyRoundTrips: a TryLockMulti with a key
// whose row stayed marked as held by shared holds after the last one left
// costs one round trip more than on free keys (the settling statement),
// not a read, a transaction of five and the acquiring statement again.
func TestTryLockMultiFreedSharedKeyRoundTrips(t *testing.T) {
	l, rt, ctx := freedKeyLocker(t)

	// The baseline, on free keys (their rows made first, as k's is).
	multi := func(keys ...string) (int, []string) {
		t.Helper()
		rt.take()
		m, err := locker.TryLockMulti(ctx, l, keys)
		if err != nil {
			t.Fatalf("TryLockMulti of %q: %v", keys, err)
		}
		n, sql := rt.take()
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		return n, sql
	}
	multi("free", "other")
	base, _ := multi("free", "other")

	n, sql := multi("k", "other")
	t.Logf("TryLockMulti: %d round trips on free keys, %d with a freed key marked shared", base, n)
	if n > base+1 {
		t.Errorf("TryLockMulti with a freed key marked shared took %d round trips, want at most %d (free keys' %d and the settling):\n%s", n, base+1, base, strings.Join(sql, "\n"))
	}
}

// TestTryLockMultiHeldKeyRoundTrips: a TryLockMulti refused because a
// plain lock holds one of its keys costs its one statement, not a read
// after it that looks for keys marked as held by shared holds.
func TestTryLockMultiHeldKeyRoundTrips(t *testing.T) {
	prefix := t.Name() + "-" + rand.Text()[:8] + "/"
	l, pool, rt, ctx := tracedLocker(t, prefix)
	holder, err := postgres.New(pool, locker.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	h, err := holder.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(ctx)
	rt.take()
	m, err := locker.TryLockMulti(ctx, l, []string{"other", "k"})
	if err == nil {
		_ = m.Unlock(ctx)
		t.Fatal("TryLockMulti got a key a plain lock holds")
	}
	n, sql := rt.take()
	if n > 1 {
		t.Errorf("TryLockMulti refused by a plain lock took %d round trips, want 1:\n%s", n, strings.Join(sql, "\n"))
	}
}

// freedKeyLocker returns a tracedLocker whose key "k" has its row left
// marked as held by shared holds after the last one left.
func freedKeyLocker(t *testing.T) (locker.Locker, *roundTrips, context.Context) {
	t.Helper()
	l, pool, rt, ctx := tracedLocker(t, t.Name()+"-"+rand.Text()[:8]+"/")
	s, _ := locker.NewSemaphore(l, "k", 2)
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	releaseWhileLocked(ctx, t, pool, p)
	return l, rt, ctx
}

// tracedLocker returns a Locker with prefix on a pool whose statements rt
// counts, the pool, and a ctx for the test.
func tracedLocker(t *testing.T, prefix string) (locker.Locker, *pgxpool.Pool, *roundTrips, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
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
	t.Cleanup(pool.Close)
	l, err := postgres.New(pool, locker.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, pool, rt, ctx
}
