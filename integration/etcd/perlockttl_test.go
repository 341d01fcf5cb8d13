package etcd_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
)

// grantedTTL returns the granted TTL of the lease of key's holder (the
// first waiter key).
func grantedTTL(t *testing.T, cli *clientv3.Client, key string) time.Duration {
	t.Helper()
	ws := waiters(t, cli, key)
	if len(ws) == 0 {
		t.Fatalf("no waiter key for %q", key)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := cli.TimeToLive(ctx, ws[0].lease)
	if err != nil {
		t.Fatalf("TimeToLive of the holder's lease: %v", err)
	}
	return time.Duration(resp.GrantedTTL) * time.Second
}

// holdThrough keeps lk for d, checking every TTL/2 that it is not lost
// and that other cannot take key. It returns lk's loss when no renewal
// came back in time (rerun.StarvedLoss: the round says nothing, and other
// may then take key rightly), and fails t when lk was lost otherwise or
// other took key while lk held it.
func holdThrough(t *testing.T, ctx context.Context, lk locker.Lock, other locker.Locker, key string, d time.Duration) error {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(testTTL / 2)
		if err := lk.Err(); err != nil {
			if starved := starvedLoss(lk); starved != nil {
				return starved
			}
			t.Fatalf("the lock was lost while held and renewed: %v", err)
		}
		if o, err := other.TryLock(ctx, key); err == nil {
			_ = o.Unlock(ctx)
			if starved := starvedLoss(lk); starved != nil {
				return starved
			}
			t.Fatalf("another Locker took %q while it was held", key)
		}
	}
	return nil
}

// starvedLoss returns lk's loss when no renewal came back in time
// (rerun.StarvedLoss), and nil otherwise.
func starvedLoss(lk locker.Lock) error {
	return rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal)
}

// unlockHeld unlocks lk. It returns lk's loss when no renewal came back in
// time, and fails t when Unlock failed otherwise.
func unlockHeld(ctx context.Context, t *testing.T, lk locker.Lock) error {
	t.Helper()
	if err := lk.Unlock(ctx); err != nil {
		if starved := starvedLoss(lk); starved != nil {
			return starved
		}
		t.Fatalf("Unlock: %v", err)
	}
	return nil
}

// TestMinHoldOverTTL: a MinHold longer than the Locker's TTL is honoured on
// etcd (the README's cron recipe): the key sits on a lease of the MinHold,
// the lock is renewed through it, and the key goes back onto the Locker's
// lease once the MinHold has shrunk to the TTL; queued or not. A round in
// which a lock was lost only because no renewal came back in time
// (rerun.StarvedLoss) says nothing, and runs again on a key of its own, up
// to three rounds; a lock lost any other way fails at once.
func TestMinHoldOverTTL(t *testing.T) {
	eps := sharedEtcd(t)
	cli := newClient(t, eps)
	a, b := newLocker(t, eps), newLocker(t, eps)
	minHold := 3 * testTTL
	if err := locker.CheckLockOptions(a, locker.MinHold(minHold)); err != nil {
		t.Fatalf("CheckLockOptions(MinHold(%v)) with a TTL of %v: %v; want nil", minHold, testTTL, err)
	}
	for _, queued := range []bool{false, true} {
		name := map[bool]string{false: "first", true: "queued"}[queued]
		t.Run(name, func(t *testing.T) {
			rerun.Starved(t, 3, func(int) error {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				key := uniqueKey(t)
				var first locker.Lock
				if queued {
					var err error
					if first, err = b.Lock(ctx, key); err != nil {
						t.Fatal(err)
					}
				}
				got := make(chan locker.Lock, 1)
				errc := make(chan error, 1)
				go func() {
					lk, err := a.Lock(ctx, key, locker.MinHold(minHold))
					got <- lk
					errc <- err
				}()
				if queued {
					waitFor(t, 10*time.Second, "the second waiter", func() bool { return len(waiters(t, cli, key)) == 2 })
					if err := unlockHeld(ctx, t, first); err != nil {
						cancel()
						if lk := <-got; <-errc == nil {
							_ = lk.Unlock(ctx)
						}
						return err
					}
				}
				lk := <-got
				if err := <-errc; err != nil {
					t.Fatalf("Lock with MinHold(%v) over a TTL of %v: %v", minHold, testTTL, err)
				}
				if g := grantedTTL(t, cli, key); g < minHold {
					t.Errorf("the holder's key is on a lease of %v, want at least the MinHold %v", g, minHold)
				}
				if err := holdThrough(t, ctx, lk, b, key, minHold+testTTL); err != nil {
					return err
				}
				if g := grantedTTL(t, cli, key); g != testTTL {
					t.Errorf("past its MinHold the key is on a lease of %v, want the Locker's (%v)", g, testTTL)
				}
				if err := unlockHeld(ctx, t, lk); err != nil {
					return err
				}
				if lk, err := b.TryLock(ctx, key); err != nil {
					t.Errorf("the key must be free after Unlock once its MinHold has passed: %v", err)
				} else {
					_ = lk.Unlock(ctx)
				}
				return nil
			})
		})
	}
}

// TestLockTTLOwnLease: a lock with a TTL of its own (not whole seconds, so
// rounded up to etcd's) keeps its own lease alive across renewals. A round
// in which the lock was lost only because no renewal came back in time
// (rerun.StarvedLoss) says nothing, and runs again on a key of its own, up
// to three rounds; a lock lost any other way fails at once.
func TestLockTTLOwnLease(t *testing.T) {
	eps := sharedEtcd(t)
	cli := newClient(t, eps)
	a, b := newLocker(t, eps), newLocker(t, eps)
	ttl := testTTL + testTTL/4
	want := ttl.Truncate(time.Second) + time.Second
	rerun.Starved(t, 3, func(int) error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		key := uniqueKey(t)
		lk, err := a.TryLock(ctx, key, locker.TTL(ttl))
		if err != nil {
			t.Fatalf("TryLock with TTL(%v): %v", ttl, err)
		}
		if g := grantedTTL(t, cli, key); g != want {
			t.Errorf("the key is on a lease of %v, want %v (the lock's TTL rounded up)", g, want)
		}
		if err := holdThrough(t, ctx, lk, b, key, 4*ttl); err != nil {
			return err
		}
		if g := grantedTTL(t, cli, key); g != want {
			t.Errorf("after renewals the key is on a lease of %v, want %v", g, want)
		}
		if err := unlockHeld(ctx, t, lk); err != nil {
			return err
		}
		if lk, err := b.TryLock(ctx, key); err != nil {
			t.Errorf("the key must be free after Unlock: %v", err)
		} else {
			_ = lk.Unlock(ctx)
		}
		return nil
	})
}
