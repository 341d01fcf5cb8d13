package redis

import (
	"testing"

	"github.com/golocker/locker/internal/storeenv"
)

// TestEarlyRegisterAllocatesNothing: every fair Lock registers early, before
// its first attempt; on a key whose channel is not subscribed (every
// uncontended Lock) that registers nothing and allocates nothing.
func TestEarlyRegisterAllocatesNothing(t *testing.T) {
	_, d := newTestLocker(t, newClient(t, storeenv.Redis(t).Addr()))
	key := lockKey(uniqueKey(t))
	n := testing.AllocsPerRun(100, func() {
		w, cancel, err := d.notify.register(key, "owner", true)
		if w != nil || cancel != nil || err != nil {
			t.Fatalf("an early registration on a key nobody subscribed returned waiter %v, cancel %v, error %v; want none", w, cancel != nil, err)
		}
	})
	if n != 0 {
		t.Errorf("an early registration on a key nobody subscribed makes %v allocations, want 0", n)
	}
}
