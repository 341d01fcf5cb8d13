package memory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/leakcheck"
	"github.com/golocker/locker/memory"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestHolderAndTokens(t *testing.T) {
	store := memory.NewStore()
	l, err := memory.New(store, locker.WithPrefix("p:"), locker.WithOwnerLabel("replica-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var last uint64
	for i := 0; i < 10; i++ {
		lk, err := l.TryLock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if lk.Token() <= last {
			t.Fatalf("tokens must strictly increase: %d after %d", lk.Token(), last)
		}
		last = lk.Token()
		label, token, held := store.Holder("p:k")
		if !held || label != "replica-1" || token != last {
			t.Fatalf("Holder = %q %d %v, want replica-1 %d true", label, token, held, last)
		}
		if err := lk.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, held := store.Holder("p:k"); held {
		t.Fatal("released key still held")
	}
}

func TestWaitersWokenByRelease(t *testing.T) {
	store := memory.NewStore()
	// A long TTL: a waiter that got the key soon after Unlock was woken by
	// the release, not by the holder's expiry.
	opts := []locker.Option{locker.WithTTL(time.Minute), locker.WithBackoff(locker.ConstantBackoff(time.Minute))}
	a, _ := memory.New(store, opts...)
	b, _ := memory.New(store, opts...)
	defer a.Close()
	defer b.Close()
	lk, err := a.Lock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		l2, err := b.Lock(ctx, "k")
		if err == nil {
			err = l2.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter must be woken by the release: %v", err)
	}
}

func TestNoSubscriptionsLeft(t *testing.T) {
	store := memory.NewStore()
	a, _ := memory.New(store)
	b, _ := memory.New(store)
	defer a.Close()
	defer b.Close()
	lk, err := a.Lock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			defer cancel()
			if _, err := b.Lock(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
				t.Errorf("want ErrNotAcquired, got %v", err)
			}
		}()
	}
	wg.Wait()
	if n := store.Subscribers("k"); n != 0 {
		t.Fatalf("cancelled waits left %d subscriptions", n)
	}
	lk.Unlock(t.Context())
	l2, err := b.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatalf("no waiter residue must block the key: %v", err)
	}
	l2.Unlock(t.Context())
}
