package rerun

import (
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker/internal/stall"
)

// recorder is a testing.TB that records a Fatalf instead of ending the
// test, which Starved's own failures need.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Logf(string, ...any)   {}
func (r *recorder) Helper()               {}

// TestStarved checks that a starved round runs again, that a round that
// passes ends the runs, and that starving in every attempt fails.
func TestStarved(t *testing.T) {
	starved := errors.New("lost at its deadline")
	for _, c := range []struct {
		name       string
		passAt     int // the attempt that passes; 0: none
		wantRounds int
		wantFail   bool
	}{
		{"FirstPasses", 1, 1, false},
		{"ThirdPasses", 3, 3, false},
		{"NonePasses", 0, 3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{TB: t}
			rounds := 0
			Starved(r, 3, func(i int) error {
				if rounds++; i != rounds {
					t.Errorf("round %d was given the number %d", rounds, i)
				}
				if i == c.passAt {
					return nil
				}
				return starved
			})
			if rounds != c.wantRounds || r.failed != c.wantFail {
				t.Errorf("%d rounds, failed %v; want %d rounds, failed %v", rounds, r.failed, c.wantRounds, c.wantFail)
			}
		})
	}
}

// TestStalled checks that a failed round runs again only when the process
// stalled while it ran, that a round that passes ends the runs, and that
// failing while stalled in every attempt fails.
func TestStalled(t *testing.T) {
	fault := errors.New("a renewed lock was lost")
	for _, c := range []struct {
		name       string
		passAt     int  // the attempt that passes; 0: none
		stalls     bool // the process stalls in every round
		wantRounds int
		wantFail   bool
	}{
		{"FirstPasses", 1, false, 1, false},
		{"FailsWithoutStall", 0, false, 1, true},
		{"PassesAfterStalls", 3, true, 3, false},
		{"StallsEveryTime", 0, true, 3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{TB: t}
			w := &stall.Watch{}
			rounds := 0
			stalled(r, 3, w, func(i int) error {
				if rounds++; i != rounds {
					t.Errorf("round %d was given the number %d", rounds, i)
				}
				if c.stalls {
					now := time.Now()
					w.Add(now, now.Add(time.Second))
				}
				if i == c.passAt {
					return nil
				}
				return fault
			})
			if rounds != c.wantRounds || r.failed != c.wantFail {
				t.Errorf("%d rounds, failed %v; want %d rounds, failed %v", rounds, r.failed, c.wantRounds, c.wantFail)
			}
		})
	}
}
