package locker

import (
	"runtime"
	"testing"
	"time"
)

// TestLockInUseWakesNoWatchdog: a Locker that takes and releases locks one
// after another does not wake its watchdog for each Lock. Each wake-up is
// a goroutine switch, which costs a short Lock+Unlock a good part of its
// CPU; the watchdog only has to wake when a renewal comes due.
func TestLockInUseWakesNoWatchdog(t *testing.T) {
	// One P: a watchdog woken by a Lock runs only once the test sleeps,
	// after the Unlock, and finds no hold, as it mostly does when the
	// Unlock waits for the network.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	e := newTestEngine(t, newTableDriver(), WithTTL(time.Minute))
	const n = 100
	passes := e.passes.Load()
	for range n {
		lk, err := e.TryLock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	// A renewal is due 20 s after a Lock: within the loop no pass is
	// needed but the first, whatever the machine's speed.
	if got := e.passes.Load() - passes; got > n/10 {
		t.Fatalf("%d Lock+Unlock calls woke the watchdog %d times: a Lock must not wake it when no renewal comes due sooner", n, got)
	}
}

// TestMaxHoldEndsOnTimeBesideLongerLocks: a lock whose MaxHold ends before
// its first renewal ends then, though the watchdog plans to wake for
// another lock later.
func TestMaxHoldEndsOnTimeBesideLongerLocks(t *testing.T) {
	e := newTestEngine(t, newTableDriver(), WithTTL(time.Minute))
	if _, err := e.TryLock(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	// The watchdog plans its next pass for a's renewal, 20 s ahead.
	time.Sleep(50 * time.Millisecond)
	b, err := e.TryLock(t.Context(), "b", MaxHold(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a lock past its MaxHold must end: its Done is still open 10 s after its 100 ms MaxHold")
	}
}
