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
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/golocker/locker"
	"github.com/golocker/locker/postgres"
)

// roundTrips is a pgx tracer that counts the statements a pool sends, a
// transaction's BEGIN and COMMIT included: one round trip each. It skips
// the notifier's connections (those that ran LISTEN): a wait's
// subscription is not the attempts' cost.
type roundTrips struct {
	mu     sync.Mutex
	n      int
	sql    []string
	listen map[*pgx.Conn]bool
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.HasPrefix(d.SQL, "LISTEN ") {
		if r.listen == nil {
			r.listen = map[*pgx.Conn]bool{}
		}
		r.listen[c] = true
	}
	if r.listen[c] {
		return ctx
	}
	r.n++
	r.sql = append(r.sql, d.SQL)
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch: its statements go in one round trip.
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	for _, q := range d.Batch.QueuedQueries {
		r.sql = append(r.sql, "(batch) "+q.SQL)
	}
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

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
	releaseWhileLocked(ctx, t, pool, movedPermit(ctx, t, s))
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

// TestSharedWakeRoundTrips: a permit waiter woken by the holder's release
// claims the permit in one round trip, on a pgx pool and on a *sql.DB,
// not in a transaction of five statements.
func TestSharedWakeRoundTrips(t *testing.T) {
	for _, viaDB := range []bool{false, true} {
		t.Run(map[bool]string{false: "Pool", true: "SQLDB"}[viaDB], func(t *testing.T) {
			prefix := t.Name() + "-" + rand.Text()[:8] + "/"
			l, _, rt, ctx := tracedLocker(t, prefix)
			if viaDB {
				cc, err := pgx.ParseConfig(exampleURL)
				if err != nil {
					t.Fatal(err)
				}
				rt = &roundTrips{}
				cc.Tracer = rt
				db := stdlib.OpenDB(*cc)
				t.Cleanup(func() { _ = db.Close() })
				if l, err = postgres.NewDB(db, locker.WithPrefix(prefix)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
			}
			// The holder's statements go on a pool of its own, not
			// counted.
			pool, err := pgxpool.New(ctx, exampleURL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			holder, err := postgres.New(pool, locker.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()

			hs, _ := locker.NewSemaphore(holder, "k", 1)
			ws, _ := locker.NewSemaphore(l, "k", 1)
			// The first hand-off starts the waiter's LISTEN connection,
			// whose self-test goes through the pool: it does not count.
			// Nor does one that counted nothing: an attempt of the
			// waiter's sent before the release (its retry after
			// subscribing, late) got the permit.
			handOff(ctx, t, holder, hs, ws, rt)
			for range 5 {
				n, sql := handOff(ctx, t, holder, hs, ws, rt)
				if n == 0 {
					continue
				}
				if n != 1 {
					t.Errorf("the woken waiter's claim took %d round trips, want 1:\n%s", n, strings.Join(sql, "\n"))
				}
				return
			}
			t.Error("every hand-off was claimed by an attempt sent before the release")
		})
	}
}

// handOff takes a permit of hs, waits until a wait for a permit of ws is
// in line, releases the permit, and returns the round trips rt counted
// from the release until the waiter had the permit.
func handOff(ctx context.Context, t *testing.T, holder locker.Locker, hs, ws *locker.Semaphore, rt *roundTrips) (int, []string) {
	t.Helper()
	p, err := hs.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acquired, proceed, got := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		wp, err := ws.Acquire(ctx)
		close(acquired)
		if err == nil {
			<-proceed
			err = wp.Unlock(ctx)
		}
		got <- err
	}()
	for {
		st, err := locker.Inspect(ctx, holder, hs.Key())
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiters == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Let the waiter's first attempt return and its wait begin.
	time.Sleep(50 * time.Millisecond)
	rt.take()
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	<-acquired
	n, sql := rt.take()

	close(proceed)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	return n, sql
}
