package postgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/postgres"
)

// sharedLocker returns a Locker on the test database with a fresh prefix,
// and its pool.
func sharedLocker(t *testing.T) (locker.Locker, *pgxpool.Pool, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, exampleURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l, err := postgres.New(pool, locker.WithPrefix(t.Name()+"-"+rand.Text()[:8]+"/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, pool, ctx
}

// TestSharedConflicts checks that a key is one kind of lock at a time: a
// semaphore with two limits, a semaphore and a read-write lock, a shared
// hold and a plain lock all fail with ErrInvalidOption naming both sides.
func TestSharedConflicts(t *testing.T) {
	l, _, ctx := sharedLocker(t)
	four, _ := locker.NewSemaphore(l, "k", 4)
	five, _ := locker.NewSemaphore(l, "k", 5)
	rw, _ := locker.NewRWMutex(l, "k")
	p, err := four.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"limit 5": func() error { _, err := five.TryAcquire(ctx); return err },
		"rwmutex": func() error { _, err := rw.RLock(ctx); return err },
		"lock":    func() error { _, err := l.Lock(ctx, "k"); return err },
	} {
		err := call()
		if !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("%s on a semaphore of 4: got %v, want ErrInvalidOption", name, err)
		} else if name != "lock" && !strings.Contains(err.Error(), "4") {
			t.Errorf("%s on a semaphore of 4: got %v, want an error naming the limit 4", name, err)
		}
	}
	// The one-statement multi-key take must not take the marked row.
	if ml, err := locker.TryLockMulti(ctx, l, []string{"k", "k2"}); err == nil {
		ml.Unlock(ctx)
		t.Errorf("TryLockMulti took a semaphore's key while a permit was held")
	} else if !errors.Is(err, locker.ErrNotAcquired) && !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("TryLockMulti on a semaphore's key: got %v, want ErrNotAcquired or ErrInvalidOption", err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("the key must be free for a plain lock once the last permit is back: %v", err)
	}
	if _, err := five.TryAcquire(ctx); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("TryAcquire on a plain lock's key: got %v, want ErrInvalidOption", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := five.TryAcquire(ctx); err != nil {
		t.Errorf("a semaphore on a key whose plain lock was released: %v", err)
	} else if p.Token() <= lk.Token() {
		t.Errorf("a permit after a lock got token %d, not above the lock's %d", p.Token(), lk.Token())
	}
}

// TestSharedCrashedThenPlain checks that a key whose shared holders all
// crashed is free for a plain lock once their holds expired, with a token
// above theirs.
func TestSharedCrashedThenPlain(t *testing.T) {
	for _, moved := range []bool{false, true} {
		t.Run(fmt.Sprintf("moved=%v", moved), func(t *testing.T) {
			l, pool, ctx := sharedLocker(t)
			s, _ := locker.NewSemaphore(l, "k", 2)
			var p locker.Lock
			if moved {
				p = movedPermit(ctx, t, s)
			} else {
				var err error
				if p, err = s.TryAcquire(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// The holder crashed two seconds ago, in its key's row or in
			// the table of shared holds.
			for _, table := range []string{postgres.DefaultTable, postgres.DefaultTable + "_shared"} {
				if _, err := pool.Exec(ctx, `UPDATE "`+table+`" SET lock_until = clock_timestamp() - interval '2 seconds'`+
					` WHERE starts_with(task_name, $1)`, t.Name()+"-"); err != nil {
					t.Fatal(err)
				}
			}
			lk, err := l.TryLock(ctx, "k")
			if err != nil {
				t.Fatalf("a plain lock on a key whose shared holders crashed: %v", err)
			}
			if lk.Token() <= p.Token() {
				t.Errorf("the plain lock got token %d, not above the crashed permit's %d", lk.Token(), p.Token())
			}
			_ = lk.Unlock(ctx)
		})
	}
}

// TestSharedKeep checks MinHold on a permit: given back early, it stays
// taken.
func TestSharedKeep(t *testing.T) {
	l, _, ctx := sharedLocker(t)
	s, _ := locker.NewSemaphore(l, "s", 4)
	p, err := s.TryAcquireN(ctx, 4, locker.MinHold(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("a permit given up with a MinHold left must stay taken: got %v", err)
	}
	st, err := locker.Inspect(ctx, l, "s")
	if err != nil || !st.Held || st.Limit != 4 || len(st.Holders) != 1 || st.Holders[0].Weight != 4 {
		t.Errorf("Inspect of a kept permit: %+v, %v", st, err)
	}
}

// TestGuardRefusesSharedHolds checks that Guard refuses a permit with an
// error naming the problem.
func TestGuardRefusesSharedHolds(t *testing.T) {
	l, pool, ctx := sharedLocker(t)
	s, _ := locker.NewSemaphore(l, "s", 2)
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := postgres.Guard(ctx, tx, p); !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "permit") {
		t.Errorf("Guard of a permit: got %v, want ErrInvalidOption naming the permit", err)
	}
}

// TestSharedList checks that List shows a semaphore's key with its
// holders, and leaves it out once its holders crashed.
func TestSharedList(t *testing.T) {
	l, _, ctx := sharedLocker(t)
	s, _ := locker.NewSemaphore(l, "s", 3)
	if _, err := s.TryAcquireN(ctx, 2); err != nil {
		t.Fatal(err)
	}
	var got []locker.KeyStatus
	for ks, err := range locker.List(ctx, l, "") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ks)
	}
	if len(got) != 1 || got[0].Key != "s" || got[0].Limit != 3 || len(got[0].Holders) != 1 || got[0].Holders[0].Weight != 2 {
		t.Errorf("List of a semaphore with one holder of 2 permits: %+v", got)
	}
}

// BenchmarkShared measures an uncontended permit (TryAcquire+Unlock of a
// semaphore) and read hold beside a plain TryLock+Unlock, on the test
// database (run with -bench=Shared).
func BenchmarkShared(b *testing.B) {
	pool, err := pgxpool.New(b.Context(), exampleURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	l, err := postgres.New(pool, locker.WithPrefix("bench-"+rand.Text()[:8]+"/"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := b.Context()
	s, _ := locker.NewSemaphore(l, "s", 4)
	rw, _ := locker.NewRWMutex(l, "rw")
	for _, bc := range []struct {
		name string
		take func() (locker.Lock, error)
	}{
		{"Lock", func() (locker.Lock, error) { return l.TryLock(ctx, "k") }},
		{"Permit", func() (locker.Lock, error) { return s.TryAcquire(ctx) }},
		{"ReadHold", func() (locker.Lock, error) { return rw.TryRLock(ctx) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				lk, err := bc.take()
				if err != nil {
					b.Fatal(err)
				}
				if err := lk.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSharedExecModes: a shared attempt on a key that is not free is a
// pgx batch, which follows the pool's exec mode; it grants, refuses and
// fences in each of them, the simple protocol (PgBouncer before 1.21)
// included.
func TestSharedExecModes(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			pc, err := pgxpool.ParseConfig(exampleURL)
			if err != nil {
				t.Fatal(err)
			}
			pc.ConnConfig.DefaultQueryExecMode = mode
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
			first, err := s.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Unlock(ctx)
			// The key is held: the second permit goes through the batch.
			second, err := s.TryAcquire(ctx)
			if err != nil {
				t.Fatalf("a second permit of 2: %v", err)
			}
			defer second.Unlock(ctx)
			if second.Token() <= first.Token() {
				t.Errorf("the second permit's token %d is not above the first's %d", second.Token(), first.Token())
			}
			if p, err := s.TryAcquire(ctx); !errors.Is(err, locker.ErrNotAcquired) {
				t.Errorf("a third permit of 2: got %v, want ErrNotAcquired", err)
				if err == nil {
					_ = p.Unlock(ctx)
				}
			}
			other, _ := locker.NewSemaphore(l, "k", 3)
			if p, err := other.TryAcquire(ctx); !errors.Is(err, locker.ErrInvalidOption) {
				t.Errorf("a permit of 3 on a semaphore of 2: got %v, want ErrInvalidOption", err)
				if err == nil {
					_ = p.Unlock(ctx)
				}
			}
		})
	}
}
