package mysql_test

import (
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/mysql"
)

// TestFreedSharedKeyFirstTry: a key whose shared holds all expired, and
// whose row their leaving did not free, is taken by the first TryLockMulti
// or TryLock that asks, not only by the next one.
func TestFreedSharedKeyFirstTry(t *testing.T) {
	for _, multi := range []bool{true, false} {
		l, ctx := sharedLocker(t, mysql.Config{})
		s, _ := locker.NewSemaphore(l, "k", 2)
		// A permit given up with a MinHold: nobody renews it, and its
		// leaving does not free the key's row.
		p, err := s.TryAcquire(ctx, locker.MinHold(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// Wait until the permit expired, as Inspect sees it.
		for {
			st, err := locker.Inspect(ctx, l, "k")
			if err != nil {
				t.Fatal(err)
			}
			if !st.Held {
				break
			}
			if !driver.Sleep(ctx, 20*time.Millisecond) {
				t.Fatal(ctx.Err())
			}
		}
		if multi {
			m, err := locker.TryLockMulti(ctx, l, []string{"k", "other"})
			if err != nil {
				t.Fatalf("TryLockMulti of a key whose last permit expired: %v", err)
			}
			_ = m.Unlock(ctx)
		} else {
			lk, err := l.TryLock(ctx, "k")
			if err != nil {
				t.Fatalf("TryLock of a key whose last permit expired: %v", err)
			}
			_ = lk.Unlock(ctx)
		}
	}
}
