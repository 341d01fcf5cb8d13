package rerun

import (
	"testing"
	"time"

	"github.com/golocker/locker/internal/stall"
)

// Stalled runs round, given its number from 1, until it returns nil, at
// most attempts times, while a stall.Watch sized for Lockers of ttl
// watches the process. A round returns its failure instead of failing t.
// A round that failed while the process stalled runs again, logged: its
// Lockers' renewals may have starved, and their locks may be lost as the
// contract allows. A round that failed without a stall, or the last one,
// fails t at once. A round may still fail t itself, for a fault no stall
// explains.
func Stalled(t testing.TB, attempts int, ttl time.Duration, round func(attempt int) error) {
	t.Helper()
	w := stall.ForTTL(ttl)
	defer w.Stop()
	stalled(t, attempts, w, round)
}

// stalled is Stalled with its Watch.
func stalled(t testing.TB, attempts int, w *stall.Watch, round func(attempt int) error) {
	t.Helper()
	for i := 1; ; i++ {
		from := time.Now()
		err := round(i)
		if err == nil {
			return
		}
		d := w.Longest(from, time.Now())
		if d == 0 {
			t.Fatalf("attempt %d of %d: %v", i, attempts, err)
			return
		}
		if i >= attempts {
			t.Fatalf("attempt %d of %d: %v (the process stalled for up to %v in every attempt)", i, attempts, err, d.Round(time.Millisecond))
			return
		}
		t.Logf("attempt %d of %d failed while the process stalled for up to %v: %v: the round runs again", i, attempts, d.Round(time.Millisecond), err)
	}
}
