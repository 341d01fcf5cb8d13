package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/memory"
)

// TestSharedConflicts checks that a key is one kind of lock at a time: a
// semaphore with two limits, a semaphore and a read-write lock, a shared
// hold and a plain lock all fail with ErrInvalidOption naming both sides.
func TestSharedConflicts(t *testing.T) {
	store := memory.NewStore()
	l, err := memory.New(store)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
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
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "4") {
			t.Errorf("%s on a semaphore of 4: got %v, want ErrInvalidOption naming the limit 4", name, err)
		}
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
	_ = lk.Unlock(ctx)
}

// TestSemaphoreWeights checks weighted permits and that a heavy waiter is
// not overtaken by later light ones.
func TestSemaphoreWeights(t *testing.T) {
	store := memory.NewStore()
	a, _ := memory.New(store)
	b, _ := memory.New(store)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	sa, _ := locker.NewSemaphore(a, "w", 3)
	sb, _ := locker.NewSemaphore(b, "w", 3)
	p1, err := sa.TryAcquireN(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.TryAcquireN(ctx, 2); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("2 permits of 3 with 2 taken: got %v, want ErrNotAcquired", err)
	}
	heavy := make(chan error, 1)
	go func() {
		p, err := sb.AcquireN(ctx, 3)
		if err == nil {
			err = p.Unlock(ctx)
		}
		heavy <- err
	}()
	// Once the heavy request waits in line, a light one must not pass it.
	for store.Subscribers("w") == 0 {
		select {
		case err := <-heavy:
			t.Fatalf("AcquireN(3) returned before it waited in line: %v", err)
		case <-ctx.Done():
			t.Fatal("AcquireN(3) never waited in line")
		case <-time.After(time.Millisecond):
		}
	}
	if p, err := sa.TryAcquire(ctx); err == nil {
		_ = p.Unlock(ctx)
		t.Error("a permit was granted past a waiting request for 3")
	}
	if err := p1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-heavy; err != nil {
		t.Fatalf("AcquireN(3) once the permits were back: %v", err)
	}
	if _, err := sa.AcquireN(ctx, 4); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("AcquireN above the limit: got %v, want ErrInvalidOption", err)
	}
	if _, err := locker.NewSemaphore(a, "w", 0); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("NewSemaphore with limit 0: got %v, want ErrInvalidOption", err)
	}
}

// TestSharedRenewAndClose checks that permits and read holds are renewed
// past their TTL, and that Close ends and releases them.
func TestSharedRenewAndClose(t *testing.T) {
	const ttl = 300 * time.Millisecond
	// A round whose holds were lost while the process stalled runs again
	// (rerun.Stalled): the store expires a hold whose renewals starved.
	// Holds that are not renewed are lost in every round, and fail at once.
	rerun.Stalled(t, 3, ttl, func(int) error {
		store := memory.NewStore()
		a, _ := memory.New(store, locker.WithTTL(ttl))
		defer a.Close()
		b, _ := memory.New(store, locker.WithTTL(ttl))
		defer b.Close()
		ctx := t.Context()
		sa, _ := locker.NewSemaphore(a, "s", 1)
		ra, _ := locker.NewRWMutex(a, "r")
		p, err := sa.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ra.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * ttl)
		for _, lk := range []locker.Lock{p, r} {
			if lk.Err() != nil {
				return fmt.Errorf("a shared hold must be renewed while held: %w", lk.Err())
			}
		}
		sb, _ := locker.NewSemaphore(b, "s", 1)
		rb, _ := locker.NewRWMutex(b, "r")
		if _, err := sb.TryAcquire(ctx); !errors.Is(err, locker.ErrNotAcquired) {
			return fmt.Errorf("the only permit, renewed, must stay taken: got %v (the holder's Err: %v)", err, p.Err())
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		for _, lk := range []locker.Lock{p, r} {
			select {
			case <-lk.Done():
			default:
				t.Fatal("Close must close the Done of every shared hold")
			}
		}
		if q, err := sb.TryAcquire(ctx); err != nil {
			t.Fatalf("Close must give the permit back: %v", err)
		} else {
			_ = q.Unlock(ctx)
		}
		if w, err := rb.TryLock(ctx); err != nil {
			t.Fatalf("Close must release the read hold: %v", err)
		} else {
			_ = w.Unlock(ctx)
		}
		return nil
	})
}

// TestSharedInspect checks that Inspect of a semaphore's key lists its
// holders with their weights, and its limit.
func TestSharedInspect(t *testing.T) {
	store := memory.NewStore()
	l, _ := memory.New(store, locker.WithOwnerLabel("worker-1"))
	defer l.Close()
	ctx := t.Context()
	sem, _ := locker.NewSemaphore(l, "s", 4)
	p1, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := sem.TryAcquireN(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	st, err := locker.Inspect(ctx, l, "s")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Limit != 4 || len(st.Holders) != 2 || st.Token != p2.Token() {
		t.Fatalf("Inspect = %+v, want held, limit 4, 2 holders, newest token %d", st, p2.Token())
	}
	for i, want := range []struct {
		token  uint64
		weight int
	}{{p1.Token(), 1}, {p2.Token(), 2}} {
		h := st.Holders[i]
		if h.Token != want.token || h.Weight != want.weight || h.Mode != locker.Permits || h.Label != "worker-1" || h.Expires.IsZero() {
			t.Errorf("holder %d = %+v, want token %d, weight %d, permits, label worker-1, an expiry", i, h, want.token, want.weight)
		}
	}
	_ = p1.Unlock(ctx)
	_ = p2.Unlock(ctx)
	if st, err := locker.Inspect(ctx, l, "s"); err != nil || st.Held || st.Holders != nil || st.Limit != 0 {
		t.Fatalf("Inspect of a free key = %+v, %v; want nothing", st, err)
	}
}

// BenchmarkUncontended compares an uncontended semaphore permit and read
// hold with a lock: one acquire and one release each.
func BenchmarkUncontended(b *testing.B) {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	sem, _ := locker.NewSemaphore(l, "s", 4)
	rw, _ := locker.NewRWMutex(l, "r")
	for _, bc := range []struct {
		name    string
		acquire func() (locker.Lock, error)
	}{
		{"Lock", func() (locker.Lock, error) { return l.Lock(ctx, "k") }},
		{"Semaphore", func() (locker.Lock, error) { return sem.Acquire(ctx) }},
		{"RLock", func() (locker.Lock, error) { return rw.RLock(ctx) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				lk, err := bc.acquire()
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

// TestSetLimitEndsOldWaits checks that a wait in progress that asked with
// the old limit fails with ErrInvalidOption once SetLimit changed it, and
// leaves no place in line: a permit freed later goes to a wait with the
// new limit.
func TestSetLimitEndsOldWaits(t *testing.T) {
	store := memory.NewStore()
	a, err := memory.New(store)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := memory.New(store)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sa, _ := locker.NewSemaphore(a, "k", 1)
	sb, _ := locker.NewSemaphore(b, "k", 1)
	held, err := sa.TryAcquireN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := sb.AcquireN(ctx, 1) // queued behind held, with limit 1
		waited <- err
	}()
	for { // until b's wait is in line
		st, err := locker.Inspect(ctx, a, "k")
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiters > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := sa.SetLimit(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "3") {
		t.Errorf("a wait with the old limit after SetLimit: got %v, want ErrInvalidOption naming the new limit 3", err)
	}
	// Its place in line was withdrawn before it returned.
	st, err := locker.Inspect(ctx, a, "k")
	switch {
	case err != nil:
		t.Fatal(err)
	case st.Limit != 3:
		t.Fatalf("after SetLimit(3) the key's limit is %d", st.Limit)
	case st.Waiters != 0:
		t.Fatalf("the failed wait is still in line (%d waiters)", st.Waiters)
	}
	p, err := sa.TryAcquireN(ctx, 2)
	if err != nil {
		t.Fatalf("two more permits under the raised limit: %v", err)
	}
	_ = p.Unlock(ctx)
	_ = held.Unlock(ctx)
}
