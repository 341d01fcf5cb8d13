package zookeeper_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
)

// findings are the failures of a round of rerun.Starved that held a lock,
// kept until settle knows that the round says something: a holder starved
// of renewals frees its key, and an intruder or a waiter then finds it
// gone.
type findings []string

func (f *findings) errorf(format string, args ...any) {
	*f = append(*f, fmt.Sprintf(format, args...))
}

// settle ends a round that held lk. It returns lk's loss when no renewal
// came back in time (rerun.StarvedLoss: the round says nothing, and runs
// again); otherwise it reports f, fails t if lk was lost, and unlocks lk.
func (f findings) settle(ctx context.Context, t *testing.T, lk locker.Lock) error {
	t.Helper()
	lost := lk.Err()
	if starved := rerun.StarvedLoss(lost, locker.ErrLost, locker.ErrNoRenewal); starved != nil {
		return starved
	}
	for _, m := range f {
		t.Error(m)
	}
	if lost != nil {
		t.Fatalf("the holder lost its lock: %v", lost)
	}
	if err := lk.Unlock(ctx); err != nil {
		if starved := starvedLoss(lk); starved != nil {
			return starved
		}
		t.Fatalf("Unlock: %v", err)
	}
	return nil
}

// starvedLoss returns lk's loss when no renewal came back in time
// (rerun.StarvedLoss), and nil otherwise.
func starvedLoss(lk locker.Lock) error {
	return rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal)
}
