package redis

import (
	"sync/atomic"
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
		w, reg, err := d.notify.register(key, "owner", true)
		if w != nil || reg != nil || err != nil {
			t.Fatalf("an early registration on a key nobody subscribed returned waiter %v, registration %v, error %v; want none", w, reg != nil, err)
		}
	})
	if n != 0 {
		t.Errorf("an early registration on a key nobody subscribed makes %v allocations, want 0", n)
	}
}

// TestRegistrationAllocatesNothing: a LockMulti's wait registers its
// waiter for every key, before its first attempt when the key's channel is
// subscribed (every wait of a contended set); the registration lives in
// the caller's slice, so registering and leaving allocate nothing. The code
// before made 2 allocations per key (a sync.Once and its closure).
func TestRegistrationAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	_, d := newTestLocker(t, newClient(t, storeenv.Redis(t).Addr()))
	key := lockKey(uniqueKey(t))
	// Another wait keeps the key's subscription.
	var other registration
	if ok, err := d.notify.add(key, newWaiter("other"), false, &other); !ok {
		t.Fatalf("registering a waiter: %v", err)
	}
	defer other.leave()
	w := newMultiWaiter("wid")
	regs := make([]registration, 1)
	n := testing.AllocsPerRun(100, func() {
		if ok, err := d.notify.add(key, &w, true, &regs[0]); !ok {
			t.Fatalf("an early registration on a key with a subscription registered nothing: %v", err)
		}
		regs[0].leave()
	})
	if n != 0 {
		t.Errorf("registering a waiter for a subscribed key and leaving make %v allocations, want 0", n)
	}
}

// TestNotifierSpawn: close stops the goroutines of spawn and waits for
// them, also when the notifier never opened its connection (a Locker whose
// LockMulti recorded a next wait before any of its waits subscribed);
// after close, spawn runs nothing.
func TestNotifierSpawn(t *testing.T) {
	n := newNotifier(nil, nil, func(error) {}, "lid")
	var ended atomic.Bool
	if !n.spawn(func(stop <-chan struct{}) {
		<-stop
		ended.Store(true)
	}) {
		t.Fatal("spawn on an open notifier ran nothing")
	}
	n.close()
	if !ended.Load() {
		t.Error("close returned before the goroutine of spawn ended")
	}
	if n.spawn(func(<-chan struct{}) { t.Error("spawn after close ran its function") }) {
		t.Error("spawn after close reported a goroutine")
	}
}
