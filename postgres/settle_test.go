package postgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/postgres"
)

// TestSettleRacesRenewal: a key's row is freed of shared holds only when
// none is left. A holder whose row looked expired when a release or a
// plain acquisition (of one key or several) began to settle the key, but
// whose renewal committed before the settling deleted it, keeps the key: a
// plain lock is refused. Nor does a shared attempt that counted it as
// expired get its permit.
func TestSettleRacesRenewal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		early bool // the other permit is released before the race
		// settle starts settling the key while the other holder's
		// renewal is under way; it returns when done.
		settle func(ctx context.Context, t *testing.T, p locker.Lock, l locker.Locker)
	}{
		{"release of another permit", false, func(ctx context.Context, t *testing.T, p locker.Lock, _ locker.Locker) {
			if err := p.Unlock(ctx); err != nil {
				t.Errorf("Unlock of the other permit: %v", err)
			}
		}},
		{"plain acquisition", true, func(ctx context.Context, t *testing.T, _ locker.Lock, l locker.Locker) {
			if lk, err := l.TryLock(ctx, "k"); err == nil {
				t.Errorf("a plain lock was granted (token %d) while a renewed permit held the key", lk.Token())
				_ = lk.Unlock(ctx)
			}
		}},
		{"multi-key acquisition", true, func(ctx context.Context, t *testing.T, _ locker.Lock, l locker.Locker) {
			if m, err := locker.TryLockMulti(ctx, l, []string{"k", "other"}); err == nil {
				t.Errorf("a multi-key lock was granted (token %d) while a renewed permit held the key", m.Token("k"))
				_ = m.Unlock(ctx)
			}
		}},
		{"permit beyond the limit", false, func(ctx context.Context, t *testing.T, _ locker.Lock, l locker.Locker) {
			s, _ := locker.NewSemaphore(l, "k", 2)
			if p, err := s.TryAcquire(ctx); err == nil {
				t.Errorf("a third permit of 2 was granted (token %d) while a renewed permit held the key", p.Token())
				_ = p.Unlock(ctx)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			pool, err := pgxpool.New(ctx, exampleURL)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			prefix := "settle-" + rand.Text()[:8] + "/"
			open := func() locker.Locker {
				l, err := postgres.New(pool, locker.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			a, b := open(), open()
			sa, _ := locker.NewSemaphore(a, "k", 2)
			sb, _ := locker.NewSemaphore(b, "k", 2)
			pa, err := sa.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sb.TryAcquire(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.early {
				if err := pa.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// b's row looks expired, and its renewal is under way.
			st := `"` + postgres.DefaultTable + `_shared"`
			if _, err := pool.Exec(ctx, "UPDATE "+st+" SET lock_until = clock_timestamp() - interval '1 second'"+
				" WHERE task_name = $1 AND token <> $2", prefix+"k", int64(pa.Token())); err != nil {
				t.Fatal(err)
			}
			renewal, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = renewal.Rollback(context.WithoutCancel(ctx)) }()
			if _, err := renewal.Exec(ctx, "UPDATE "+st+" SET lock_until = clock_timestamp() + interval '1 minute'"+
				" WHERE task_name = $1 AND token <> $2", prefix+"k", int64(pa.Token())); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				tc.settle(ctx, t, pa, a)
			}()
			// Commit the renewal once the settling waits for its row
			// (pg_stat_activity keeps the first 1 kB of a statement: the
			// claim's DELETE comes later).
			for {
				var waiting int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"+
					" AND query LIKE '%FROM "+st+"%'").Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting > 0 {
					break
				}
				select {
				case <-done:
					t.Fatal("the settling did not wait for the renewal's row")
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				case <-time.After(5 * time.Millisecond):
				}
			}
			if err := renewal.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			<-done
			lk, err := b.TryLock(ctx, "k")
			switch {
			case err == nil:
				t.Errorf("a plain lock was granted (token %d) while a renewed permit held the key", lk.Token())
				_ = lk.Unlock(ctx)
			case !errors.Is(err, locker.ErrInvalidOption):
				t.Errorf("TryLock of a key a permit holds: got %v, want ErrInvalidOption", err)
			}
		})
	}
}
