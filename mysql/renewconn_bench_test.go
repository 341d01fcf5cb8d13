package mysql_test

import (
	"crypto/rand"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/mysql"
)

// BenchmarkRenewal measures what the renewal connection costs: one lock's
// renewal (an Extend, which runs a round's statement) and an uncontended
// Lock+Unlock, on a PollOnly Locker (run with -bench=Renewal).
func BenchmarkRenewal(b *testing.B) {
	open := func(b *testing.B) locker.Locker {
		l, err := mysql.Config{PollOnly: true}.New(openDB(b, exampleDSN))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	b.Run("Extend", func(b *testing.B) {
		l := open(b)
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
	b.Run("LockUnlock", func(b *testing.B) {
		l := open(b)
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
