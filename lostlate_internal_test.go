package locker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// lostRecorder is a tableDriver that keeps the Lost callback of each grant.
type lostRecorder struct {
	*tableDriver
	mu   sync.Mutex
	lost map[string]func(error)
}

func (d *lostRecorder) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := d.tableDriver.TryAcquire(ctx, r)
	if err == nil {
		d.mu.Lock()
		d.lost[r.Key] = r.Lost
		d.mu.Unlock()
	}
	return g, err
}

// TestLossPastDeadlineIsTheDeadlines: a driver that reports a loss after
// the lock's local deadline passed (the process stalled, and the driver's
// goroutine ran before the watchdog) does not name the cause: the lock was
// lost at its deadline, and its Err wraps ErrNoRenewal, as when the
// watchdog ends it (and as Unlock reports past the deadline). The
// Observer's LossDeadline and callers' errors.Is read that.
func TestLossPastDeadlineIsTheDeadlines(t *testing.T) {
	d := &lostRecorder{tableDriver: newTableDriver(), lost: make(map[string]func(error))}
	e := newTestEngine(t, d, WithTTL(time.Minute)) // the watchdog stays far off
	lk, err := e.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	h := lk.(*handle).h
	e.mu.Lock()
	h.setDeadline(time.Now().Add(-time.Millisecond)) // as after a stall
	e.mu.Unlock()
	d.mu.Lock()
	lost := d.lost[h.lease.Key]
	d.mu.Unlock()
	storeSays := errors.New("the store's session ended")
	lost(storeSays)
	<-lk.Done()
	if err := lk.Err(); !errors.Is(err, ErrLost) || !errors.Is(err, ErrNoRenewal) || errors.Is(err, storeSays) {
		t.Fatalf("a loss the driver reported past the local deadline: Err = %v; want ErrLost and ErrNoRenewal, not the driver's late cause", err)
	}
}
