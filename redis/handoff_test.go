package redis

import (
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/storeenv"
)

// TestHandedOverLockIsRenewed: a waiter handed the key (for a claim window
// of 500 ms) confirms it and keeps it, renewed, for as long as it likes.
// A run in which a lock was lost only because no renewal came back in time
// (rerun.StarvedLoss) says nothing, and runs again on a key of its own, up
// to three runs; a lock lost any other way (its claim not confirmed), or
// the key taken while it is held, fails at once.
func TestHandedOverLockIsRenewed(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 90*time.Second)
	ttl := 3 * time.Second // renewals every second, past the claim
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(ttl))
	waiter, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(ttl))
	other, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(ttl))
	rerun.Starved(t, 3, func(int) error {
		key := uniqueKey(t)
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
			unlocked := lk.Unlock(ctx)
			wl := <-got
			if wl == nil {
				t.FailNow()
			}
			if unlocked != nil {
				_ = wl.Unlock(ctx)
				if s := starvedLoss(lk); s != nil {
					return s
				}
				t.Fatal(unlocked)
			}
			for range 6 { // 1.5 s: three claim windows
				time.Sleep(250 * time.Millisecond)
				select {
				case <-wl.Done():
					if s := starvedLoss(wl); s != nil {
						return s
					}
					t.Fatalf("round %d: the handed-over lock was lost: %v", round, wl.Err())
				default:
				}
				if ol, err := other.TryLock(ctx, key); err == nil {
					_ = ol.Unlock(ctx)
					if s := starvedLoss(wl); s != nil {
						return s
					}
					t.Fatalf("round %d: another Locker got the key while the handed-over lock was held", round)
				}
			}
			if err := wl.Unlock(ctx); err != nil {
				if s := starvedLoss(wl); s != nil {
					return s
				}
				t.Fatalf("round %d: %v", round, err)
			}
		}
		return nil
	})
}
