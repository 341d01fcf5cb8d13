package postgres_test

import (
	"crypto/rand"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/postgres"
)

// BenchmarkRenewal measures what the renewal connection costs: one lock's
// renewal (an Extend, which runs a round's statement) and an uncontended
// Lock+Unlock, on a pgx pool and on a *sql.DB (run with -bench=Renewal).
func BenchmarkRenewal(b *testing.B) {
	handles := []struct {
		name string
		open func(b *testing.B) locker.Locker
	}{
		{"pgxpool", func(b *testing.B) locker.Locker {
			pool, err := pgxpool.New(b.Context(), exampleURL)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			l, err := postgres.NewWithConfig(pool, postgres.Config{PollOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			return l
		}},
		{"sql.DB", func(b *testing.B) locker.Locker {
			db, err := sql.Open("pgx", exampleURL)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = db.Close() })
			l, err := postgres.NewDBWithConfig(db, postgres.Config{PollOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			return l
		}},
	}
	for _, h := range handles {
		b.Run(h.name+"/Extend", func(b *testing.B) {
			l := h.open(b)
			defer l.Close()
			ctx := b.Context()
			lk, err := l.TryLock(ctx, "bench-extend-"+rand.Text())
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = lk.Unlock(ctx) }()
			for b.Loop() {
				if err := locker.Extend(ctx, lk); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(h.name+"/LockUnlock", func(b *testing.B) {
			l := h.open(b)
			defer l.Close()
			ctx := b.Context()
			key := "bench-lock-" + rand.Text()
			for b.Loop() {
				lk, err := l.Lock(ctx, key)
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
