// Package renewtest holds what the backends' tests of renewals share: the
// kinds of hold every renewal must keep, and a benchmark of a renewal's
// cost beside an uncontended Lock+Unlock.
package renewtest

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

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

// KeptBesideBusyQueries fails t when lk, a hold of kind name, is lost while
// the caller's own slow queries hold every connection of its pool: it runs
// query n times at once, waits until inUse reports n connections taken,
// watches lk for two and a half TTLs, then waits for the queries and
// unlocks lk.
func KeptBesideBusyQueries(ctx context.Context, t testing.TB, lk locker.Lock, name string, ttl time.Duration, n int, query func(context.Context) error, inUse func() int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := query(ctx); err != nil {
				t.Errorf("the caller's query: %v", err)
			}
		}()
	}
	for inUse() < n {
		select {
		case <-ctx.Done():
			wg.Wait()
			t.Fatalf("%d of %d connections taken by the caller's queries: %v", inUse(), n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	select {
	case <-lk.Done():
		t.Errorf("the %s was lost while the caller's queries held every pooled connection: %v", name, lk.Err())
	case <-time.After(5 * ttl / 2):
	}
	wg.Wait()
	if err := lk.Unlock(ctx); err != nil && lk.Err() == nil {
		t.Fatal(err)
	}
}
