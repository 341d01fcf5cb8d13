package mysql

import (
	"context"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// TestNameStaysWhileAHoldStays checks that a driver holding two shared
// holds of a key keeps the key's named lock until the last of them
// leaves, whichever leaves first: a waiter then waits for that name
// instead of polling, and the last release wakes it.
func TestNameStaysWhileAHoldStays(t *testing.T) {
	for _, laterFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "LaterLeavesFirst", false: "EarlierLeavesFirst"}[laterFirst], func(t *testing.T) {
			db, ctx := openTestDB(t)
			h := wakeDriver(t, db)
			k, req, _ := freeKey(t, h)
			permits := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1, Queue: true}
			earlier, err := h.TryAcquireShared(ctx, req(), permits)
			if err != nil {
				t.Fatal(err)
			}
			name := h.notify.name(k)
			awaitCount(ctx, t, db, "SELECT IS_USED_LOCK('"+name+"') IS NOT NULL")
			later, err := h.TryAcquireShared(ctx, req(), permits)
			if err != nil {
				t.Fatal(err)
			}
			first, last := later, earlier
			if !laterFirst {
				first, last = earlier, later
			}
			// The name may need a round of the holder goroutine.
			awaitTaken(ctx, t, h, k)
			if h.notify.holdsName(k, first.State.(*shareState).owner) {
				t.Error("holdsName reports that the release of a hold gives the name up while another hold of the driver holds the key: the name must stay, and that release must wake the waiters itself")
			}
			if err := h.Release(ctx, driver.Lease{Key: k, State: first.State}); err != nil {
				t.Fatal(err)
			}
			// The holder goroutine gives names up before it takes new
			// ones in the same round: once it took another key's name,
			// it has seen the release above.
			k2, req2, _ := freeKey(t, h)
			other, err := h.TryAcquire(ctx, req2())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = h.Release(ctx, driver.Lease{Key: k2, State: other.State}) }()
			awaitCount(ctx, t, db, "SELECT IS_USED_LOCK('"+h.notify.name(k2)+"') IS NOT NULL")
			var used bool
			if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK('"+name+"') IS NOT NULL").Scan(&used); err != nil {
				t.Fatal(err)
			}
			if !used {
				t.Fatal("the key's named lock was given up while a shared hold of the driver still holds the key: its waiters poll instead of waiting for the name")
			}
			if !h.notify.holdsName(k, last.State.(*shareState).owner) {
				t.Error("holdsName must report that the release of the driver's last hold of the key gives the name up")
			}
			if err := h.Release(ctx, driver.Lease{Key: k, State: last.State}); err != nil {
				t.Fatal(err)
			}
			awaitCount(ctx, t, db, "SELECT IS_USED_LOCK('"+name+"') IS NULL")
		})
	}
}

// awaitTaken waits until d's holder goroutine holds key's named lock.
func awaitTaken(ctx context.Context, t *testing.T, d *sqlDriver, key string) {
	t.Helper()
	name := d.notify.name(key)
	for {
		d.notify.mu.Lock()
		w := d.notify.want[name]
		taken := w != nil && w.taken
		d.notify.mu.Unlock()
		if taken {
			return
		}
		if !driver.Sleep(ctx, 10*time.Millisecond) {
			t.Fatal("the holder goroutine never took the key's named lock")
		}
	}
}
