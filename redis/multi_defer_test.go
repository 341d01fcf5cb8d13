package redis

import (
	"context"
	"testing"
	"time"

	"github.com/golocker/locker"
)

// TestUnfairReleaseMultiDefersWakeUp checks that an unfair Locker's
// release of keys a LockMulti waits for wakes nobody when the Locker
// takes the keys again (multi_defer.go): the release runs no PUBLISH (5
// commands, MONITOR), and the wait's record stays. Closing the Locker then wakes the wait after
// the next release, long before it would try again by itself (TTL/3).
func TestUnfairReleaseMultiDefersWakeUp(t *testing.T) {
	ctx, addr, c, base, keys := multiWaitSetup(t)
	holder, hd := newTestLocker(t, newClient(t, addr), multiWaitOptions...)
	hd.unfairArg = "1"
	hd.defers.grace = time.Hour // only its own LockMulti or Close ends it
	waiter, wd := newTestLocker(t, newClient(t, addr), multiWaitOptions...)
	wd.unfairArg = "1"
	hm, err := locker.LockMulti(ctx, holder, keys)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		m, err := locker.LockMulti(ctx, waiter, keys)
		if err == nil {
			err = m.Unlock(ctx)
		}
		got <- err
	}()
	awaitRecorded(ctx, t, c, keys[0], wd.lid)
	loadScripts(ctx, t, c, hd.multiRelease, hd.multiAcquire)
	m := startMonitor(t, addr)
	if err := hm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	hm, err = locker.TryLockMulti(ctx, holder, keys)
	if err != nil {
		t.Fatalf("the releasing Locker could not take its keys again: %v", err)
	}
	c.Ping(ctx) // ends the last script's lines in MONITOR
	// A wake-up would run HGETALL, HDEL and PUBLISH in the release.
	m.expect(ctx, t, base, []costStep{
		{"releasing three awaited keys, the wake-up deferred", 5},
		{"taking them again", 10},
	})
	awaitRecorded(ctx, t, c, keys[0], wd.lid) // its record is still there
	if err := hm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("closing the Locker that deferred a wake-up did not wake the wait")
	}
}

// TestUnfairDeferredWakeUpNotRetaken checks that the wake-up an unfair
// Locker's release deferred comes when the Locker does not lock the keys
// again (deferGrace after the release), long before the wait would try
// again by itself (TTL/3).
func TestUnfairDeferredWakeUpNotRetaken(t *testing.T) {
	ctx, addr, c, _, keys := multiWaitSetup(t)
	holder, hd := newTestLocker(t, newClient(t, addr), multiWaitOptions...)
	hd.unfairArg = "1"
	waiter, wd := newTestLocker(t, newClient(t, addr), multiWaitOptions...)
	hm, err := locker.LockMulti(ctx, holder, keys)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		m, err := locker.LockMulti(ctx, waiter, keys)
		if err == nil {
			err = m.Unlock(ctx)
		}
		got <- err
	}()
	awaitRecorded(ctx, t, c, keys[0], wd.lid)
	if err := hm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the deferred wake-up did not come")
	}
}

// TestUnfairDeferredStreakEnds checks that an unfair Locker that keeps
// releasing and taking keys a LockMulti waits for wakes the wait once its
// streak of deferred releases is deferBound old: the wait gets the keys.
func TestUnfairDeferredStreakEnds(t *testing.T) {
	ctx, addr, c, _, keys := multiWaitSetup(t)
	holder, hd := newTestLocker(t, newClient(t, addr), multiWaitOptions...)
	hd.unfairArg = "1"
	hd.defers.grace = time.Hour // only its own LockMulti or the bound ends it
	waiter, wd := newTestLocker(t, newClient(t, addr), multiWaitOptions...)
	wd.unfairArg = "1"
	hm, err := locker.LockMulti(ctx, holder, keys)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		m, err := locker.LockMulti(ctx, waiter, keys)
		if err == nil {
			err = m.Unlock(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	awaitRecorded(ctx, t, c, keys[0], wd.lid)
	for {
		if err := hm.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		if hm, err = locker.TryLockMulti(ctx, holder, keys); err != nil {
			// The wait took them: it returns once it released them.
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			return
		}
	}
}
