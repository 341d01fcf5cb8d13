package locker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/rerun"
)

// TestLossesForRerun: of the losses the engine records, rerun.StarvedLoss
// takes for starved renewals only those at the local deadline whose last
// renewal timed out or never came back; a refused renewal, or one that
// failed with any other error, is a loss a test must see. The renewals'
// outcomes go through applyRenewals, as a round's would; the TTL is long
// enough that the watchdog's own rounds stay out of the way.
func TestLossesForRerun(t *testing.T) {
	e := newTestEngine(t, newTableDriver(), WithTTL(time.Minute))
	refused := fmt.Errorf("%w: row taken", driver.ErrNotHeld)
	for _, c := range []struct {
		name  string
		last  error // the last renewal's outcome; nil: none came back
		final bool  // the loss comes from the renewal, not the deadline
		want  bool
	}{
		{name: "NoneCameBack", want: true},
		{name: "LastTimedOut", last: fmt.Errorf("renew: %w", context.DeadlineExceeded), want: true},
		{name: "LastFailed", last: fmt.Errorf("renew: conn closed")},
		{name: "Refused", last: refused, final: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			lk, err := e.TryLock(t.Context(), c.name)
			if err != nil {
				t.Fatal(err)
			}
			h := lk.(*handle).h
			if c.last != nil {
				e.applyRenewals(renewResult{holds: []*hold{h}, ttls: make([]time.Duration, 1), validity: make([]time.Duration, 1), errs: []error{c.last}, sent: time.Now()})
			}
			if !c.final {
				pastDeadline(e, lk)
			}
			err = lk.Err()
			if err == nil {
				t.Fatal("the lock was not lost")
			}
			if got := rerun.StarvedLoss(err, ErrLost, ErrNoRenewal) != nil; got != c.want {
				t.Errorf("rerun.StarvedLoss(%v) != nil is %v; want %v", err, got, c.want)
			}
		})
	}
}
