package redis

import (
	"testing"
	"time"

	"github.com/golocker/locker"
)

// TestNextWaitAdoptedAtOnce checks that the next wait a release records for
// its Locker (multi_next.go) costs no goroutine when the Locker's next
// LockMulti adopts it within the grace time, and that Close gives up one
// that no LockMulti adopted: its record is gone when Close returns. The
// grace time is an hour here, so that the outcome depends on no timing.
func TestNextWaitAdoptedAtOnce(t *testing.T) {
	ctx, addr, c, _, keys := multiWaitSetup(t)
	opts := multiWaitOptions
	first, _ := newTestLocker(t, newClient(t, addr), opts...)
	a, ad := newTestLocker(t, newClient(t, addr), opts...)
	ad.next.grace = time.Hour
	b, bd := newTestLocker(t, newClient(t, addr), opts...)
	wait := func(l locker.Locker, lid string) <-chan *locker.MultiLock {
		got := lockMultiAsync(ctx, t, l, keys)
		if lid != "" {
			awaitRecorded(ctx, t, c, keys[0], lid)
		}
		return got
	}
	held := func(got <-chan *locker.MultiLock) *locker.MultiLock { return awaitMulti(t, got, "a Locker") }
	unlock := func(m *locker.MultiLock) { unlockMulti(ctx, t, m) }
	// a waits once, so that its channels stay subscribed while it holds.
	m, err := locker.LockMulti(ctx, first, keys)
	if err != nil {
		t.Fatal(err)
	}
	got := wait(a, ad.lid)
	unlock(m)
	m = held(got)
	// a's release wakes b and records a's next wait, which a's LockMulti
	// adopts at once.
	got = wait(b, bd.lid)
	unlock(m)
	if watchRecords(ctx, t, c, keys[0], ad.lid) != 1 {
		t.Fatal("the release that woke a LockMulti recorded no next wait of its Locker")
	}
	again := wait(a, "")
	m = held(got)
	unlock(m)
	m = held(again)
	if n := ad.next.watched.Load(); n != 0 {
		t.Errorf("a next wait adopted at once started %d goroutines, want 0", n)
	}
	// Once more, and then a closes instead of locking again.
	got = wait(b, bd.lid)
	unlock(m)
	if watchRecords(ctx, t, c, keys[0], ad.lid) != 1 {
		t.Fatal("the release that woke a LockMulti recorded no next wait of its Locker")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := watchRecords(ctx, t, c, keys[0], ad.lid); n != 0 {
		t.Errorf("Close left %d records of its Locker's unadopted next wait", n)
	}
	unlock(held(got))
}
