package gocron_test

import (
	"errors"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/gocronlock"
	"github.com/golocker/locker/memory"
)

// TestMinHoldRefusedWhenBuilt: on every backend, a MinHold longer than the
// TTL (the README's cron recipe with a short TTL) either works at every run
// or is refused by NewLocker, naming MinHold: never accepted when built and
// refused at every tick, which gocron would skip silently.
func TestMinHoldRefusedWhenBuilt(t *testing.T) {
	mem := memory.NewStore()
	for _, b := range backendsUnderTest {
		t.Run(b.Name, func(t *testing.T) {
			l := lockers(t, b, mem)[0]
			minHold := 2 * ttl
			jl, err := gocronlock.NewLocker(l, gocronlock.MinHold(minHold))
			if err != nil {
				if !errors.Is(err, locker.ErrInvalidOption) {
					t.Fatalf("NewLocker with MinHold %v over a TTL of %v: %v; want an error matching ErrInvalidOption", minHold, ttl, err)
				}
				t.Logf("refused when built: %v", err)
				return
			}
			lk, err := jl.Lock(t.Context(), "refuse-"+t.Name())
			if err != nil {
				t.Fatalf("NewLocker accepted MinHold %v over a TTL of %v, and the run was refused: %v", minHold, ttl, err)
			}
			_ = lk.Unlock(t.Context())
		})
	}
}
