package redis

import (
	"context"
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
// each wait in turn. Closing the Locker wakes what it still owes, before
// the client may go (a Locker from Open closes its client after Close).

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
// names' owner keys) still owed one, and when it is due.
type deferral struct {
	keys []string
	due  time.Time
}

// deferrals are a Locker's deferred wake-ups and streaks, by store key.
type deferrals struct {
	mu     sync.Mutex
	owed   map[string]*deferral
	streak map[string]time.Time // when the key's streak began
	grace  time.Duration        // deferGrace when 0 (tests set it)
	bound  time.Duration        // deferBound when 0 (tests set it)

	// pending are the deferrals not yet due when timer last ran, in the
	// order of their releases, which is the order of their due times:
	// one timer of the Locker's, armed while any is pending, runs them
	// (fire). A deferral retaken in full stays there, with no keys, until
	// it is due, unless nothing is owed at all: then the timer stops
	// (docs/design.md says why one timer, not one per release).
	pending []*deferral
	timer   *time.Timer
	armed   bool

	// The timers' wake-ups run with ctx, which Close cancels, and on wg,
	// which Close waits for (running of them run now); a wake-up that
	// failed because ctx ended leaves its keys in retry, for Close to
	// wake. After closed, no timer starts a wake-up.
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	running int
	closed  bool
	retry   []string
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
	if df.closed {
		// Closed after the release was sent: wake now.
		df.mu.Unlock()
		d.wakeOwed(context.Background(), f)
		return
	}
	if df.ctx == nil {
		df.ctx, df.cancel = context.WithCancel(context.Background())
	}
	grace := df.grace
	if grace == 0 {
		grace = deferGrace
	}
	f.due = now.Add(grace)
	df.pending = append(df.pending, f)
	if !df.armed {
		df.armed = true
		if df.timer == nil {
			df.timer = time.AfterFunc(grace, d.fire)
		} else {
			df.timer.Reset(grace)
		}
	}
	df.mu.Unlock()
}

// fire runs the wake-ups of the deferrals now due that still owe keys,
// and arms the timer for the next one pending.
func (d *redisDriver) fire() {
	df := &d.defers
	df.mu.Lock()
	if df.closed {
		// Close took the keys, or wakes them.
		df.armed = false
		df.mu.Unlock()
		return
	}
	now := time.Now()
	var due []*deferral
	n := 0
	for ; n < len(df.pending) && !df.pending[n].due.After(now); n++ {
		if f := df.pending[n]; len(f.keys) > 0 {
			due = append(due, f)
		}
		df.pending[n] = nil
	}
	df.pending = df.pending[n:]
	if len(df.pending) > 0 {
		df.timer.Reset(df.pending[0].due.Sub(now))
	} else {
		df.armed = false
	}
	if len(due) == 0 {
		df.mu.Unlock()
		return
	}
	ctx := df.ctx
	df.wg.Add(1)
	df.running++
	df.mu.Unlock()
	for _, f := range due {
		d.wakeOwed(ctx, f)
	}
	df.mu.Lock()
	df.running--
	df.mu.Unlock()
	df.wg.Done()
}

// drop removes key from f's keys. The caller holds the deferrals' lock.
func (f *deferral) drop(key string) {
	for i, k := range f.keys {
		if k == key {
			f.keys[i] = f.keys[len(f.keys)-1]
			f.keys = f.keys[:len(f.keys)-1]
			break
		}
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
	if len(df.owed) == 0 && df.armed {
		// Nothing is owed: the timer would fire for nothing, and wake
		// the process to do so.
		df.timer.Stop()
		df.armed = false
		clear(df.pending)
		df.pending = df.pending[:0]
	}
}

// wakeOwed wakes, for each key f still owes, the first LockMulti recorded
// with it if the key is free (multi_giveup.lua), and ends their streaks.
// The keys whose wake-up failed once ctx ended go to retry.
func (d *redisDriver) wakeOwed(ctx context.Context, f *deferral) {
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
	failed := d.giveUpRecords(ctx, keys, "")
	if len(failed) > 0 && ctx.Err() != nil {
		df.mu.Lock()
		df.retry = append(df.retry, failed...)
		df.mu.Unlock()
	}
}

// wakeAllOwed wakes what the Locker still owes (CloseContext), before
// ctx ends: the wake-ups its timers have not started, and those they run
// now, which it cancels and waits for, running again the ones that
// failed. Unless ctx ended first, no timer uses the client once it returns.
func (d *redisDriver) wakeAllOwed(ctx context.Context) {
	df := &d.defers
	df.mu.Lock()
	df.closed = true
	if df.cancel != nil {
		df.cancel()
	}
	if df.timer != nil {
		df.timer.Stop()
	}
	df.armed, df.pending = false, nil
	var keys []string
	for _, f := range df.owed {
		// A deferral owing several keys is here once per key: the first
		// takes them all.
		keys = append(keys, f.keys...)
		f.keys = nil
	}
	clear(df.owed)
	clear(df.streak)
	running := df.running > 0
	df.mu.Unlock()
	if running {
		done := make(chan struct{})
		go func() {
			df.wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			// The wake-ups in flight end within cleanupTimeout, and
			// the goroutine with them.
			return
		}
	}
	df.mu.Lock()
	keys = append(keys, df.retry...)
	df.retry = nil
	df.mu.Unlock()
	if len(keys) > 0 {
		d.giveUpRecords(ctx, keys, "")
	}
}
