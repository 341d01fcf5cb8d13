package postgres_test

import (
	"crypto/rand"
	"testing"

	"github.com/golocker/locker"
)

// BenchmarkRenewal measures what the renewal connection costs: one lock's
// renewal (an Extend, which runs a round's statement) and an uncontended
// Lock+Unlock, on a pgx pool and on a *sql.DB (run with -bench=Renewal).
func BenchmarkRenewal(b *testing.B) {
	handles := []struct {
		name string
		open func(b *testing.B) locker.Locker
	}{
		{"pgxpool", func(b *testing.B) locker.Locker { return pollLocker(b, testPool(b, exampleURL, nil)) }},
		{"sql.DB", func(b *testing.B) locker.Locker { return pollLocker(b, testDB(b, exampleURL)) }},
	}
	for _, h := range handles {
		b.Run(h.name+"/Extend", func(b *testing.B) {
			l := h.open(b)
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
