package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/postgres"
)

// TestFreedSharedKey: a key whose last shared holder left is free for
// every use, also when its row stayed marked as held by shared holds: the
// last release skipped the row because an attempt had it locked, or the
// holder crashed. A multi-key lock, whose one statement takes no marked
// row, gets it too.
func TestFreedSharedKey(t *testing.T) {
	for _, how := range []string{"released while an attempt locked the key", "crashed"} {
		t.Run(how, func(t *testing.T) {
			l, pool, ctx := sharedLocker(t)
			s, _ := locker.NewSemaphore(l, "k", 2)
			p := movedPermit(ctx, t, s)
			key := storedKey(ctx, t, pool, p)
			if how == "crashed" {
				// The holder crashed two seconds ago.
				if _, err := pool.Exec(ctx, `UPDATE "`+postgres.DefaultTable+`_shared" SET lock_until = clock_timestamp() - interval '2 seconds'`+
					` WHERE task_name = $1`, key); err != nil {
					t.Fatal(err)
				}
			} else {
				releaseWhileLocked(ctx, t, pool, p)
			}
			var owner string
			if err := pool.QueryRow(ctx, `SELECT owner_token FROM "`+postgres.DefaultTable+`" WHERE task_name = $1`, key).Scan(&owner); err != nil {
				t.Fatal(err)
			}
			if owner != "(shared)" {
				t.Fatalf("the key's row is not left marked as held by shared holds (owner_token %q): the test no longer tests the case", owner)
			}
			if st, err := locker.Inspect(ctx, l, "k"); err != nil || st.Held || st.Limit != 0 || st.Waiters != 0 {
				t.Errorf("Inspect of a freed key: %+v, %v; want it free", st, err)
			}
			for ks, err := range locker.List(ctx, l, "") {
				t.Errorf("List of a freed key yields %+v, %v; want nothing", ks, err)
			}
			m, err := locker.TryLockMulti(ctx, l, []string{"k", "other"})
			if err != nil {
				t.Fatalf("TryLockMulti of a freed key and another: %v", err)
			}
			if m.Token("k") <= p.Token() {
				t.Errorf("TryLockMulti got token %d for the freed key, not above the permit's %d", m.Token("k"), p.Token())
			}
			if err := m.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			s3, _ := locker.NewSemaphore(l, "k", 3)
			p3, err := s3.TryAcquire(ctx)
			if err != nil {
				t.Fatalf("a Semaphore of another limit on a freed key: %v", err)
			}
			if err := p3.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLockMultiFreedSharedKey: a LockMulti on a key whose last permit was
// released while an attempt had the key's row locked gets the key at once,
// not when its ctx ends.
func TestLockMultiFreedSharedKey(t *testing.T) {
	l, pool, ctx := sharedLocker(t)
	s, _ := locker.NewSemaphore(l, "k", 2)
	releaseWhileLocked(ctx, t, pool, movedPermit(ctx, t, s))
	// Generous: a key that stays refused makes LockMulti wait it out.
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := locker.LockMulti(mctx, l, []string{"k", "other"})
	if err != nil {
		t.Fatalf("LockMulti of a freed key and another: %v", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTryLockMultiLiveSharedKey: TryLockMulti on a key that a permit holds
// fails at once with ErrInvalidOption, as TryLock does.
func TestTryLockMultiLiveSharedKey(t *testing.T) {
	l, _, ctx := sharedLocker(t)
	s, _ := locker.NewSemaphore(l, "k", 2)
	if _, err := s.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	for _, wait := range []bool{false, true} {
		var err error
		if wait {
			// Generous: without the fix, LockMulti waits it out.
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = locker.LockMulti(wctx, l, []string{"k", "other"})
			cancel()
		} else {
			_, err = locker.TryLockMulti(ctx, l, []string{"k", "other"})
		}
		if !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("multi-key lock (wait %v) of a semaphore's key and another: got %v, want ErrInvalidOption", wait, err)
		}
	}
}

// movedPermit takes a permit of s and moves it out of its key's row, into
// the table of shared holds, where a key's first holder stays until a
// second request comes: it tries a second permit, and gives it back.
func movedPermit(ctx context.Context, t *testing.T, s *locker.Semaphore) locker.Lock {
	t.Helper()
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := s.TryAcquire(ctx); err == nil {
		if err := q.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	} else if !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatal(err)
	}
	return p
}

// storedKey returns the key, prefix included, of permit p, which is in the
// table of shared holds.
func storedKey(ctx context.Context, t *testing.T, pool *pgxpool.Pool, p locker.Lock) string {
	t.Helper()
	var key string
	if err := pool.QueryRow(ctx, `SELECT task_name FROM "`+postgres.DefaultTable+`_shared" WHERE token = $1`, int64(p.Token())).Scan(&key); err != nil {
		t.Fatal(err)
	}
	return key
}

// releaseWhileLocked unlocks permit p while another transaction holds its
// key's row locked, as an attempt on the key does.
func releaseWhileLocked(ctx context.Context, t *testing.T, pool *pgxpool.Pool, p locker.Lock) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM "`+postgres.DefaultTable+`" WHERE task_name = $1 FOR UPDATE`, storedKey(ctx, t, pool, p)); err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
