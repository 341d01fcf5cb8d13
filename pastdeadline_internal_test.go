package locker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/rerun"
)

// pastDeadline moves the local deadline of lk, a lock of e, into the past
// without waking the watchdog: as a watchdog that runs late (a process
// starved of CPU) leaves a lock past its deadline and not yet ended.
func pastDeadline(e *engine, lk Lock) {
	h := lk.(*handle).h
	e.mu.Lock()
	h.setDeadline(time.Now().Add(-time.Millisecond))
	e.mu.Unlock()
}

// releaseHook is a notifyMultiDriver whose Release calls before first.
type releaseHook struct {
	*notifyMultiDriver
	before func(driver.Lease)
}

func (d *releaseHook) Release(ctx context.Context, l driver.Lease) error {
	if d.before != nil {
		d.before(l)
	}
	return d.notifyMultiDriver.Release(ctx, l)
}

// grantingSharer grants every shared hold as a lock of the table, one
// holder per key: enough for a permit's release path.
type grantingSharer struct{ *notifyMultiDriver }

func (d grantingSharer) TryAcquireShared(ctx context.Context, req driver.Request, _ driver.Share) (driver.Grant, error) {
	return d.TryAcquire(ctx, req)
}

// wantDeadlineLoss fails t unless err (what Unlock or Extend returned)
// and lk.Err report the loss at the local deadline, and lk.Done is closed.
func wantDeadlineLoss(t *testing.T, what string, err error, lk interface {
	Err() error
	Done() <-chan struct{}
}) {
	t.Helper()
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLost) || !errors.Is(err, ErrNoRenewal) {
		t.Errorf("%s past the local deadline = %v; want an error matching ErrNotHeld, ErrLost and ErrNoRenewal", what, err)
	}
	if err := lk.Err(); !errors.Is(err, ErrLost) || !errors.Is(err, ErrNoRenewal) {
		t.Errorf("Err after %s past the local deadline = %v; want ErrLost and ErrNoRenewal", what, err)
	}
	select {
	case <-lk.Done():
	default:
		t.Errorf("Done is open after %s past the local deadline", what)
	}
}

// freedSoon returns a function that waits until key is next released in
// d, whatever the release's outcome; it fails the test when no release
// came within a minute (a background release that never ran).
func freedSoon(t *testing.T, d *notifyMultiDriver, key string) (awaitFreed func()) {
	ch, _, err := d.Subscribe(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatalf("key %q was not released within a minute", key)
		}
	}
}

// TestUnlockPastTheDeadline: an Unlock of a lock past its local deadline
// that the watchdog has not ended yet reports the loss at the deadline,
// as an Unlock after the watchdog ended it does, whatever the store
// answers, and the store's copy is released in the background. Through
// Lock.Unlock and through a MultiLock's one-call release alike.
func TestUnlockPastTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		// storeDrops: the store has let the lock go (its TTL ran out)
		// before the Unlock; duringRelease: the deadline passes while the
		// release is on its way, and the store has let it go by then.
		storeDrops, duringRelease bool
	}{{"the store still holds it", false, false}, {"the store let it go", true, false}, {"the deadline passes during the release", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			d := &releaseHook{notifyMultiDriver: newNotifyMultiDriver()}
			e := newTestEngine(t, d, WithTTL(time.Minute)) // the watchdog sleeps through the test
			lk, err := e.TryLock(t.Context(), "k")
			if err != nil {
				t.Fatal(err)
			}
			freed := freedSoon(t, d.notifyMultiDriver, "k")
			switch {
			case tc.duringRelease:
				d.before = func(driver.Lease) {
					pastDeadline(e, lk)
					d.free("k")
				}
			case tc.storeDrops:
				pastDeadline(e, lk)
				d.free("k")
				freed()
			default:
				pastDeadline(e, lk)
			}
			wantDeadlineLoss(t, "Unlock", lk.Unlock(t.Context()), lk)
			if !tc.storeDrops && !tc.duringRelease {
				freed() // the background release
			}
			if d.owned("k") {
				t.Error("the store still holds the key after the background release")
			}
		})
	}
	t.Run("permit", func(t *testing.T) {
		d := grantingSharer{newNotifyMultiDriver()}
		e := newTestEngine(t, d, WithTTL(time.Minute))
		s, err := NewSemaphore(e, "s", 2)
		if err != nil {
			t.Fatal(err)
		}
		lk, err := s.TryAcquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		freed := freedSoon(t, d.notifyMultiDriver, "s")
		pastDeadline(e, lk)
		wantDeadlineLoss(t, "Unlock of a permit", lk.Unlock(t.Context()), lk)
		freed()
	})
	t.Run("MultiLock", func(t *testing.T) {
		d := newNotifyMultiDriver()
		e := newTestEngine(t, d, WithTTL(time.Minute))
		m, err := TryLockMulti(t.Context(), e, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		freed := freedSoon(t, d, "a")
		pastDeadline(e, m.Locks()[0])
		wantDeadlineLoss(t, "MultiLock.Unlock", m.Unlock(t.Context()), m)
		if d.owned("b") {
			t.Error("the key still held after the MultiLock's Unlock")
		}
		freed() // the background release of the lock past its deadline
		if d.owned("a") {
			t.Error("the store still holds the key past its deadline after the background release")
		}
	})
}

// TestExtendPastTheDeadline: an Extend of a lock past its local deadline
// that the watchdog has not ended yet reports the loss, and does not bring
// the lock back to life with a renewal.
func TestExtendPastTheDeadline(t *testing.T) {
	d := newNotifyMultiDriver()
	e := newTestEngine(t, d, WithTTL(time.Minute))
	lk, err := e.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	freed := freedSoon(t, d, "k")
	pastDeadline(e, lk)
	wantDeadlineLoss(t, "Extend", Extend(t.Context(), lk, MaxHold(time.Hour)), lk)
	freed()
}

// extendKey marks the ctx of an Extend whose renewal slowExtend holds up.
type extendKey struct{}

// slowExtend is the table driver whose renewal for an Extend marked with
// extendKey, once armed, gets no answer until its ctx ends; the watchdog's
// renewals are answered at once.
type slowExtend struct {
	*tableDriver
	armed atomic.Bool
	held  atomic.Int64 // renewals held up
}

func (d *slowExtend) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	if ctx.Value(extendKey{}) != nil && d.armed.CompareAndSwap(true, false) {
		d.held.Add(1)
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}
	return d.tableDriver.RenewBatch(ctx, ls)
}

// TestExtendOutlivesTheDeadlineItRead: an Extend whose renewal is held up
// past the lock's deadline as it stood when Extend began, while the
// watchdog's renewals keep the lock held, does not fail with its own
// bound: it renews again and succeeds. An attempt in which the lock was
// lost at its deadline all the same (the watchdog starved on a loaded
// machine) says nothing, and runs again; only a failure while the lock
// stays held fails the test.
func TestExtendOutlivesTheDeadlineItRead(t *testing.T) {
	d := &slowExtend{tableDriver: newTableDriver()}
	e := newTestEngine(t, d, WithTTL(500*time.Millisecond))
	ctx := context.WithValue(t.Context(), extendKey{}, true)
	rerun.Starved(t, 5, func(i int) error {
		lk, err := e.TryLock(t.Context(), fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		d.armed.Store(true)
		err = Extend(ctx, lk, MaxHold(time.Hour))
		if errors.Is(lk.Err(), ErrNoRenewal) {
			return fmt.Errorf("the lock was lost at its deadline (a starved watchdog): %v", err)
		}
		if err != nil {
			t.Fatalf("Extend of a lock the watchdog kept held = %v; want nil: a renewal cut short by the deadline Extend read is no failure", err)
		}
		if d.held.Load() == 0 {
			t.Fatal("the Extend's renewal was not held up")
		}
		if lk.Err() != nil || !lk.Deadline().After(time.Now()) {
			t.Fatalf("after Extend: Err = %v, Deadline %v; want the lock held", lk.Err(), lk.Deadline())
		}
		if err := lk.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		return nil
	})
}
