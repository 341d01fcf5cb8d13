package stall

import (
	"testing"
	"time"
)

// TestLongest: Longest returns the longest stall that overlaps the time
// asked about, and 0 when none does or the Watch is nil.
func TestLongest(t *testing.T) {
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	w := &Watch{}
	w.Add(at(100), at(150))
	w.Add(at(200), at(500))
	w.Add(at(600), at(620))
	for _, tc := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 90, 0},
		{0, 120, 50 * time.Millisecond},
		{140, 610, 300 * time.Millisecond},
		{550, 700, 20 * time.Millisecond},
		{630, 900, 0},
	} {
		if got := w.Longest(at(tc.from), at(tc.to)); got != tc.want {
			t.Errorf("Longest from %d ms to %d ms = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
	var none *Watch
	if d := none.Longest(at(0), at(900)); d != 0 {
		t.Errorf("a nil Watch measured a stall of %v", d)
	}
	w.Stop() // a Watch without a timer stops too
}

// TestSeesALateTimer: a Watch whose margin is below its timer's own
// lateness records stalls; one whose margin is an hour records none.
func TestSeesALateTimer(t *testing.T) {
	eager := Start(time.Millisecond, -time.Millisecond) // every firing counts
	calm := Start(time.Millisecond, time.Hour)
	from := time.Now()
	time.Sleep(50 * time.Millisecond)
	eager.Stop()
	calm.Stop()
	calm.Stop() // Stop may be called again
	if eager.Longest(from, time.Now()) == 0 {
		t.Error("a Watch that counts every firing recorded no stall in 50 ms")
	}
	if d := calm.Longest(from, time.Now()); d != 0 {
		t.Errorf("a Watch with an hour's margin recorded a stall of %v", d)
	}
}
