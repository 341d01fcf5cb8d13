package redis

import (
	"context"
	"fmt"
	"hash/maphash"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// TestRoundTripAllocations bounds the allocations of an uncontended
// Lock+Unlock, a permit's Acquire+Unlock, and LockMulti+Unlock of three
// keys on a real server, with a ctx that never ends (the calls run inline).
// go-redis makes about half of them. The names of a lock's key, and of a
// semaphore's, are made and boxed once while the Locker's names caches hold
// them, the scripts' fixed arguments and digests are boxed once per
// Locker, a release names nothing, a lock's hold, its gate ticket and its
// handle are one allocation, and a permit's wait allocates nothing more
// until a refusal. A script call's argument list stays on its caller's
// stack (only the rare paths that hand it to go-redis copy it), and
// shared_release.lua's op is boxed without an allocation. The budgets
// leave go-redis a few allocations of slack (its connection checks); the
// code before these savings made 71, 43 and 157, then 35, 34 and 109
// before the names cache, then a permit 32 while only a lock's names were
// cached, then 21, 20 and 86 while each script call allocated its
// argument list. LockMulti's holds are one allocation with their gate
// tickets and handles, its owners one string, its script call one
// allocation with its lists, and its release's lists two: 89 before. Its
// wait's registrations of the keys stay on the stack up to four keys and
// are one allocation beyond: 62, and 88 for six keys, while they were a
// slice of pointers and one of values. A script call's command and its
// argument list are one allocation when the list has up to 20 entries,
// acquire.lua's list, its seq and the release's hint stay off the heap,
// and a Lock's inbox registration takes the channel of one that ended:
// Lock+Unlock made 20 and a permit 16 before.
//
// An Open Locker's calls with context.Background() run on a pool it
// closes when it closes (their ctx ends then; closing.go), and their
// lock attempts carry the Locker's tombstone of the key, named and boxed
// with the key's names (keys.go); a permit's attempt names none (its
// tombstones are in the holds hash, shared_lib.lua). That code made 43
// and 41, then 33 and 30 while each such call took a slot of its own, then
// 27 and 24 while each attempt named a tombstone of its own. With a ctx
// that can end, each call takes a slot armed by a context.AfterFunc (40
// while a lock's keys, their boxes and the boxed name of its tombstone
// were three, 38 while each AfterFunc took a method value of its own, 36
// while each script call allocated its argument list, 33 while a permit's
// attempt named a tombstone of its owner). Before a script call's command
// and its argument list were one allocation, an Open Locker's Lock+Unlock
// made 22, its permit 16, and its permit with a ctx that can end 30.
func TestRoundTripAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	l, d := newTestLocker(t, newClient(t, storeenv.Redis(t).Addr()), locker.WithTTL(benchTTL))
	keys := distinctSlots(d, uniqueKey(t), 10)
	key, three, six := keys[0], keys[1:4], keys[4:]
	ctx := context.Background()
	sem, err := locker.NewSemaphore(l, key+".sem", 4)
	if err != nil {
		t.Fatal(err)
	}
	oc := newOwnedClient(clientOptions(storeenv.Redis(t).Addr()))
	t.Cleanup(func() { _ = oc.Close() })
	open, _ := newTestLocker(t, oc, locker.WithTTL(benchTTL))
	openSem, err := locker.NewSemaphore(open, key+".opensem", 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what   string
		budget float64
		run    func() error
	}{
		{"Lock+Unlock", 18, func() error {
			lk, err := l.Lock(ctx, key)
			if err != nil {
				return err
			}
			return lk.Unlock(ctx)
		}},
		{"a permit's Acquire+Unlock", 17, func() error {
			p, err := sem.Acquire(ctx)
			if err != nil {
				return err
			}
			return p.Unlock(ctx)
		}},
		{"Lock+Unlock on an Open Locker", 20, func() error {
			lk, err := open.Lock(ctx, key+".open")
			if err != nil {
				return err
			}
			return lk.Unlock(ctx)
		}},
		{"a permit's Acquire+Unlock on an Open Locker", 17, func() error {
			p, err := openSem.Acquire(ctx)
			if err != nil {
				return err
			}
			return p.Unlock(ctx)
		}},
		{"a permit's Acquire+Unlock on an Open Locker with a ctx that can end", 31, func() error {
			p, err := openSem.Acquire(t.Context())
			if err != nil {
				return err
			}
			return p.Unlock(t.Context())
		}},
		{"LockMulti+Unlock of three keys", 66, func() error {
			m, err := locker.LockMulti(ctx, l, three)
			if err != nil {
				return err
			}
			return m.Unlock(ctx)
		}},
		{"LockMulti+Unlock of six keys", 92, func() error {
			m, err := locker.LockMulti(ctx, l, six)
			if err != nil {
				return err
			}
			return m.Unlock(ctx)
		}},
	} {
		n := testing.AllocsPerRun(200, func() {
			if err := tc.run(); err != nil {
				t.Fatalf("%s: %v", tc.what, err)
			}
		})
		t.Logf("%s: %v allocations", tc.what, n)
		if n > tc.budget {
			t.Errorf("%s makes %v allocations, want at most %v", tc.what, n, tc.budget)
		}
	}
}

// distinctSlots returns n keys made from base that take distinct slots of
// d's names cache of locks, so that no key evicts another's names: the
// cache's seed is random, and a collision would name a key again on every
// acquisition.
func distinctSlots(d *redisDriver, base string, n int) []string {
	var keys []string
	used := make(map[uint64]bool)
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s.%d", base, i)
		if slot := maphash.String(d.names.seed, k) % namesCacheSize; !used[slot] {
			used[slot] = true
			keys = append(keys, k)
		}
	}
	return keys
}
