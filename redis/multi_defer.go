package redis

import (
	"sync"
	"time"

	"github.com/golocker/locker/driver"
)

// An unfair Locker's release of several keys that LockMultis wait for
// does not wake one of them at once (multi_release.lua, "defer"): a
// Locker that releases a contended set usually locks it again at once, and
// takes it before any woken wait could, which then records itself again
// in vain. The Locker wakes the first record itself (multi_giveup.lua,
// with no record to remove) deferGrace after the release, unless a
// LockMulti of the Locker took the key again first: then the key is held,
// and its next release decides again. So a contended set costs two
// scripts and no message while one Locker keeps locking it. A streak of
// deferred releases of a key ends deferBound after its first: that
// release wakes a wait and records the Locker's next wait behind the
// others, as a fair Locker's does (multi_next.go), so that the keys go to
// each wait in turn. Closing the Locker wakes what it still owes.

const (
	// deferGrace is how long after a deferred release the Locker waits
	// for its own LockMulti of the key before it wakes a wait.
	deferGrace = 2 * time.Millisecond
	// deferBound is how long a streak of deferred releases of a key
	// lasts at most.
	deferBound = 5 * time.Millisecond
	// maxStreaks bounds how many keys' streaks a Locker remembers: a key
	// it stops releasing (its lock expired) leaves one behind.
	maxStreaks = 1024
)

// deferral is the wake-up a release deferred: the store keys (their lock
// names' owner keys) still owed one.
type deferral struct {
	keys  []string
	timer *time.Timer
}

// deferrals are a Locker's deferred wake-ups and streaks, by store key.
type deferrals struct {
	mu     sync.Mutex
	owed   map[string]*deferral
	streak map[string]time.Time // when the key's streak began
	grace  time.Duration        // deferGrace when 0 (tests set it)
	bound  time.Duration        // deferBound when 0 (tests set it)
}

// mayDefer reports whether the release of the store keys may defer its
// wake-ups: an unfair Locker with pub/sub, and no key's streak older than
// deferBound. When it may not, the keys' streaks end.
func (d *redisDriver) mayDefer(keys []string) bool {
	if d.unfairArg != "1" || d.poll.Load() {
		return false
	}
	df := &d.defers
	df.mu.Lock()
	defer df.mu.Unlock()
	if len(df.streak) == 0 {
		return true
	}
	now, bound := time.Now(), df.bound
	if bound == 0 {
		bound = deferBound
	}
	for _, k := range keys {
		if at, ok := df.streak[k]; ok && now.Sub(at) > bound {
			for _, k := range keys {
				delete(df.streak, k)
			}
			return false
		}
	}
	return true
}

// deferred notes that a release deferred the wake-ups of the store keys,
// and arms the timer that wakes them unless the Locker takes them again
// first (retaken).
func (d *redisDriver) deferred(keys []string) {
	f := &deferral{keys: keys}
	df := &d.defers
	df.mu.Lock()
	if df.owed == nil {
		df.owed = map[string]*deferral{}
	}
	if df.streak == nil || len(df.streak) > maxStreaks {
		df.streak = map[string]time.Time{}
	}
	now := time.Now()
	for _, k := range keys {
		if old := df.owed[k]; old != nil {
			old.drop(k) // this one owes it now
		}
		df.owed[k] = f
		if _, ok := df.streak[k]; !ok {
			df.streak[k] = now
		}
	}
	grace := df.grace
	if grace == 0 {
		grace = deferGrace
	}
	f.timer = time.AfterFunc(grace, func() { d.wakeOwed(f) })
	df.mu.Unlock()
}

// drop removes key from f's keys, and stops f's timer when none is left.
// The caller holds the deferrals' lock.
func (f *deferral) drop(key string) {
	for i, k := range f.keys {
		if k == key {
			f.keys[i] = f.keys[len(f.keys)-1]
			f.keys = f.keys[:len(f.keys)-1]
			break
		}
	}
	if len(f.keys) == 0 && f.timer != nil {
		f.timer.Stop()
	}
}

// retaken notes that a LockMulti of this Locker took the keys of reqs: it
// owes them no wake-up.
func (d *redisDriver) retaken(reqs []driver.Request) {
	if d.unfairArg != "1" {
		return
	}
	df := &d.defers
	df.mu.Lock()
	defer df.mu.Unlock()
	if len(df.owed) == 0 {
		return
	}
	for _, r := range reqs {
		if f := df.owed[r.Key]; f != nil {
			delete(df.owed, r.Key)
			f.drop(r.Key)
		}
	}
}

// wakeOwed wakes, for each key f still owes, the first LockMulti recorded
// with it if the key is free (multi_giveup.lua), and ends their streaks.
func (d *redisDriver) wakeOwed(f *deferral) {
	df := &d.defers
	df.mu.Lock()
	keys := f.keys
	f.keys = nil
	for _, k := range keys {
		if df.owed[k] == f {
			delete(df.owed, k)
		}
		delete(df.streak, k)
	}
	df.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	// No field is "": the script removes no record, and wakes the first
	// one when the key is free.
	d.giveUpRecords(keys, "")
}

// wakeAllOwed wakes now what the Locker still owes (CloseContext).
func (d *redisDriver) wakeAllOwed() {
	df := &d.defers
	df.mu.Lock()
	var fs []*deferral
	for _, f := range df.owed {
		if f.timer.Stop() {
			fs = append(fs, f)
		}
	}
	df.mu.Unlock()
	for _, f := range fs {
		d.wakeOwed(f) // a deferral owing several keys: the first call wakes them all
	}
}
