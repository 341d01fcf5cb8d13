package locker

import (
	"context"
	"testing"
	"time"
)

// TestCleanupBesideASlowRound: a cleanup queued while a round of
// cleanups waits (as an undo waits out its request's fence) runs beside
// that round, not after it.
func TestCleanupBesideASlowRound(t *testing.T) {
	// The slow round ends only when the test does: its try's bound (the
	// release timeout) is longer than the test's wait.
	e := newTestEngine(t, newTableDriver(), WithTTL(time.Second), WithReleaseTimeout(time.Hour))
	release := make(chan struct{})
	defer close(release)
	slowStarted, quickRan := make(chan struct{}), make(chan struct{})
	e.addCleanup(cleanup{key: "slow", residue: func(ctx context.Context) error {
		close(slowStarted)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}})
	await(t, slowStarted, "the first cleanup did not start")
	e.addCleanup(cleanup{key: "quick", residue: func(context.Context) error {
		close(quickRan)
		return nil
	}})
	await(t, quickRan, "a cleanup queued behind a round that waits did not run until that round ended")
}
