// Package renewtest holds what the backends' tests of renewals share: the
// kinds of hold every renewal must keep, and a benchmark of a renewal's
// cost beside an uncontended Lock+Unlock.
package renewtest

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/golocker/locker"
)

// Hold is one kind of hold a Locker gives: a lock, a semaphore permit or a
// read hold, taken with one attempt.
type Hold struct {
	Name string
	Try  func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error)
}

// Holds are the kinds of hold a test of renewals runs through: every one
// must be renewed alike.
var Holds = []Hold{
	{"lock", func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error) {
		return l.TryLock(ctx, key)
	}},
	{"permit", func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error) {
		s, err := locker.NewSemaphore(l, key, 2)
		if err != nil {
			return nil, err
		}
		return s.TryAcquire(ctx)
	}},
	{"read hold", func(ctx context.Context, l locker.Locker, key string) (locker.Lock, error) {
		m, err := locker.NewRWMutex(l, key)
		if err != nil {
			return nil, err
		}
		return m.TryRLock(ctx)
	}},
}

// Bench runs two sub-benchmarks on Lockers from open: "Extend", one lock's
// renewal (an Extend runs the statement or script of a renewal round for
// one lease), and "LockUnlock", an uncontended Lock and Unlock of one key.
func Bench(b *testing.B, open func(b *testing.B) locker.Locker) {
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
