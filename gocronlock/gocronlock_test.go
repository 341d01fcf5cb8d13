package gocronlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/gocronlock"
	"github.com/golocker/locker/internal/leakcheck"
	"github.com/golocker/locker/memory"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func newLocker(t *testing.T, store *memory.Store) locker.Locker {
	t.Helper()
	l, err := memory.New(store, locker.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestLockSkipsHeldJobs: one replica gets the job's key, the other's Lock
// fails (gocron skips the run); Unlock with gocron's cancelled Shutdown ctx
// still releases it; Prefix names the key.
func TestLockSkipsHeldJobs(t *testing.T) {
	store := memory.NewStore()
	a := gocronlock.NewLocker(newLocker(t, store), gocronlock.Prefix("app/"))
	b := gocronlock.NewLocker(newLocker(t, store), gocronlock.Prefix("app/"))
	lk, err := a.Lock(t.Context(), "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, held := store.Holder("app/nightly"); !held {
		t.Error("the key is not the prefix and the job's name")
	}
	if _, err := b.Lock(t.Context(), "nightly"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("second replica: %v, want ErrNotAcquired", err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := lk.Unlock(cancelled); err != nil {
		t.Fatalf("Unlock with a cancelled ctx: %v", err)
	}
	lk, err = b.Lock(t.Context(), "nightly")
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	_ = lk.Unlock(t.Context())
}

// TestMinHoldKeepsTheKey: with MinHold the key stays taken after Unlock,
// then is free.
func TestMinHoldKeepsTheKey(t *testing.T) {
	store := memory.NewStore()
	a := gocronlock.NewLocker(newLocker(t, store), gocronlock.MinHold(300*time.Millisecond))
	b := gocronlock.NewLocker(newLocker(t, store))
	start := time.Now()
	lk, err := a.Lock(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	lk, err = b.Lock(t.Context(), "job")
	if err == nil && time.Since(start) < 300*time.Millisecond {
		t.Fatal("the key was free before its MinHold ended")
	}
	for err != nil {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the key is still taken 5 s after a MinHold of 300 ms: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
		lk, err = b.Lock(t.Context(), "job")
	}
	_ = lk.Unlock(t.Context())
}

// TestElector: one of two replicas leads; when its Locker closes, the
// other takes over.
func TestElector(t *testing.T) {
	store := memory.NewStore()
	la, lb := newLocker(t, store), newLocker(t, store)
	a, b := gocronlock.NewElector(la, "leader"), gocronlock.NewElector(lb, "leader")
	leader := func() (int, bool) {
		ea, eb := a.IsLeader(t.Context()), b.IsLeader(t.Context())
		switch {
		case ea == nil && eb == nil:
			t.Fatal("two leaders")
		case ea == nil:
			return 0, true
		case eb == nil:
			return 1, true
		}
		if !errors.Is(ea, gocronlock.ErrNotLeader) || !errors.Is(eb, gocronlock.ErrNotLeader) {
			t.Fatalf("IsLeader: %v, %v; want ErrNotLeader", ea, eb)
		}
		return 0, false
	}
	wait := func() int {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if i, ok := leader(); ok {
				return i
			}
			if time.Now().After(deadline) {
				t.Fatal("no leader within 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	first := wait()
	_ = []locker.Locker{la, lb}[first].Close()
	if second := wait(); second == first {
		t.Fatalf("replica %d still leads after its Locker closed", first)
	}
}

func TestNilLocker(t *testing.T) {
	if _, err := gocronlock.NewLocker(nil).Lock(t.Context(), "k"); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("Lock on a nil Locker: %v", err)
	}
	if err := gocronlock.NewElector(nil, "k").IsLeader(t.Context()); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("IsLeader on a nil Locker: %v", err)
	}
}
