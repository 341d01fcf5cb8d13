package redis

import (
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// TestHandedOverLockIsRenewed: a waiter handed the key (for a claim window
// of 500 ms) confirms it and keeps it, renewed, for as long as it likes.
func TestHandedOverLockIsRenewed(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
	ttl := 3 * time.Second // renewals every second, past the claim
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(ttl))
	waiter, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(ttl))
	other, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(ttl))
	for round := range 3 {
		lk, err := holder.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan locker.Lock, 1)
		go func() {
			wl, err := waiter.Lock(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- wl
		}()
		waitQueued(t, ctx, admin, key, 1)
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		wl := <-got
		if wl == nil {
			t.FailNow()
		}
		for range 6 { // 1.5 s: three claim windows
			time.Sleep(250 * time.Millisecond)
			select {
			case <-wl.Done():
				t.Fatalf("round %d: the handed-over lock was lost: %v", round, wl.Err())
			default:
			}
			if ol, err := other.TryLock(ctx, key); err == nil {
				_ = ol.Unlock(ctx)
				t.Fatalf("round %d: another Locker got the key while the handed-over lock was held", round)
			}
		}
		if err := wl.Unlock(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}
