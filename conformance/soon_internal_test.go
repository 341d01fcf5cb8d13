package conformance

import (
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/stall"
	"github.com/golocker/locker/memory"
)

// TestSoonTryLockWidensByStall: soonTryLock's window grows by a stall of
// the test process measured in it: a key freed after the window's d, but
// within d and the stall, is taken; without a stall, it is not.
func TestSoonTryLockWidensByStall(t *testing.T) {
	const d = 50 * time.Millisecond
	for _, stalled := range []bool{false, true} {
		store := memory.NewStore()
		holder, err := memory.New(store, locker.WithTTL(testTTL))
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		other, err := memory.New(store, locker.WithTTL(testTTL))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		lk, err := holder.TryLock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		from := time.Now()
		w := &stall.Watch{}
		if stalled {
			// As if the process had not run for a minute from the start.
			w.Add(from, from.Add(time.Minute))
		}
		c := &caseT{reporter: &recorder{}, t: newCaseTB(t), h: Harness{TTL: testTTL}, stalls: w}
		freed := make(chan error, 1)
		time.AfterFunc(6*d, func() { freed <- lk.Unlock(t.Context()) })
		got, err := c.soonTryLock(t.Context(), other, "k", from, d)
		if stalled && err != nil {
			t.Errorf("with a stall of a minute in the window, the key freed after %v was not taken: %v", 6*d, err)
		}
		if !stalled && err == nil {
			t.Errorf("without a stall, the key was taken %v after the window began, past its %v", time.Since(from).Round(time.Millisecond), d)
		}
		select {
		case err := <-freed:
			if err != nil {
				t.Fatalf("the holder's Unlock: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the holder's Unlock did not return within a minute")
		}
		if got != nil {
			_ = got.Unlock(t.Context())
		}
	}
}
