package rerun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
)

// TestStarvedLoss checks which losses say only that no renewal came back
// in time, on errors of the engine's shape: a loss wrapping the sentinel
// "lost" and its cause, which at the local deadline wraps noRenewal and
// the last renewal's failure (root TestLossesForRerun checks the engine's
// own errors).
func TestStarvedLoss(t *testing.T) {
	noRenewal := errors.New("no successful renewal before the local deadline")
	lost := errors.New("lock lost")
	refused := errors.New("not held")
	loss := func(cause error) error { return fmt.Errorf("hold k: %w: %w", lost, cause) }
	atDeadline := func(last error) error {
		return loss(fmt.Errorf("%w; last renewal error: %w", noRenewal, last))
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"NoneAnswered", loss(noRenewal), true},
		{"LastTimedOut", atDeadline(fmt.Errorf("renew: %w", context.DeadlineExceeded)), true},
		{"LastIOTimeout", atDeadline(fmt.Errorf("read: %w", os.ErrDeadlineExceeded)), true},
		{"LastAnswered", atDeadline(errors.New("zk: not authenticated")), false},
		{"LastBrokenConn", atDeadline(errors.New("conn closed")), false},
		{"LastAnsweredBesideTimeout", atDeadline(fmt.Errorf("renew: %w", errors.Join(refused, context.DeadlineExceeded))), false},
		{"Refused", loss(refused), false},
		{"RefusedAfterTimeout", loss(fmt.Errorf("%w after %w", refused, context.DeadlineExceeded)), false},
		{"Nil", nil, false},
	} {
		if got := StarvedLoss(c.err, lost, noRenewal); (got != nil) != c.want || got != nil && got != c.err {
			t.Errorf("%s: StarvedLoss(%v) = %v; want a starved loss: %v", c.name, c.err, got, c.want)
		}
	}
}
