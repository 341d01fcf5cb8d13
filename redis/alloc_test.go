package redis

import (
	"context"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// TestRoundTripAllocations bounds the allocations of an uncontended
// Lock+Unlock, permit, and LockMulti+Unlock of three keys on a real server,
// with a ctx that never ends (the calls run inline). go-redis makes about half of
// them. Each name of a lock is made and boxed once per acquisition, the
// scripts' fixed arguments and digests are boxed once per Locker, and a
// release names nothing. The budgets leave go-redis a few allocations of
// slack (its connection checks); the code before these savings made 71,
// 43 and 157.
func TestRoundTripAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	l, _ := newTestLocker(t, newClient(t, storeenv.Redis(t).Addr()), locker.WithTTL(benchTTL))
	key := uniqueKey(t)
	keys := []string{key + ".a", key + ".b", key + ".c"}
	ctx := context.Background()
	sem, err := locker.NewSemaphore(l, key+".sem", 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what   string
		budget float64
		run    func() error
	}{
		{"Lock+Unlock", 37, func() error {
			lk, err := l.Lock(ctx, key)
			if err != nil {
				return err
			}
			return lk.Unlock(ctx)
		}},
		{"a permit's Acquire+Unlock", 37, func() error {
			p, err := sem.Acquire(ctx)
			if err != nil {
				return err
			}
			return p.Unlock(ctx)
		}},
		{"LockMulti+Unlock of three keys", 112, func() error {
			m, err := locker.LockMulti(ctx, l, keys)
			if err != nil {
				return err
			}
			return m.Unlock(ctx)
		}},
	} {
		n := testing.AllocsPerRun(200, func() {
			if err := tc.run(); err != nil {
				t.Fatalf("%s: %v", tc.what, err)
			}
		})
		t.Logf("%s: %v allocations", tc.what, n)
		if n > tc.budget {
			t.Errorf("%s makes %v allocations, want at most %v", tc.what, n, tc.budget)
		}
	}
}
