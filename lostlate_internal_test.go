package locker

import (
	"errors"
	"testing"
	"time"
)

// TestLossPastDeadlineIsTheDeadlines: a driver that reports a loss after
// the lock's local deadline passed (the process stalled, and the driver's
// goroutine ran before the watchdog) does not name the cause: the lock was
// lost at its deadline, and its Err wraps ErrNoRenewal, as when the
// watchdog ends it (and as Unlock reports past the deadline). The
// Observer's LossDeadline and callers' errors.Is read that.
func TestLossPastDeadlineIsTheDeadlines(t *testing.T) {
	d := &lossDriver{tableDriver: newTableDriver(), lost: make(map[string]func(error))}
	e := newTestEngine(t, d, WithTTL(time.Minute)) // the watchdog stays far off
	lk, err := e.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	h := lk.(*handle).h
	e.mu.Lock()
	h.setDeadline(time.Now().Add(-time.Millisecond)) // as after a stall
	e.mu.Unlock()
	storeSays := errors.New("the store's session ended")
	d.loseWith(h.lease.Key, storeSays)
	<-lk.Done()
	if err := lk.Err(); !errors.Is(err, ErrLost) || !errors.Is(err, ErrNoRenewal) || errors.Is(err, storeSays) {
		t.Fatalf("a loss the driver reported past the local deadline: Err = %v; want ErrLost and ErrNoRenewal, not the driver's late cause", err)
	}
}
