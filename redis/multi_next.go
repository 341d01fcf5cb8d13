package redis

import (
	"context"
	_ "embed"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golocker/locker/driver"
)

//go:embed multi_giveup.lua
var multiGiveUpLua string

// A fair Locker's release that wakes a LockMulti recorded with a key also
// records, behind the other records, the next wait of the releasing
// Locker (multi_release.lua): a Locker that releases a contended set
// usually locks it again at once. That LockMulti adopts the record and
// waits without a first attempt, which would find the keys handed to the
// woken wait; a contended set then costs two scripts, not three. A record
// nobody adopts is given up (multi_giveup.lua) by a goroutine of the
// notifier's, so that the release that reaches it does not wake nobody.
// That goroutine starts only when the record is still unadopted
// adoptGrace after the release: a Locker that locks again at once starts
// none (docs/design.md, "Redis: a next wait watched only when not adopted
// at once").

// nextWait is a wait that a release recorded for its Locker's next
// LockMulti of the keys. Its waiter is registered for every key of the
// release before the release runs, so that no wake-up is missed.
type nextWait struct {
	field   string         // the record, watchField
	w       waiter         // a LockMulti's: newMultiWaiter
	keys    []string       // the store keys w is registered for
	regs    []registration // their registrations, in the order of keys
	state   atomic.Int32
	adopted chan struct{} // closed when a LockMulti adopts it
	// key is the store key the release recorded it with, and bound how
	// long it waits to be adopted (recorded).
	key   string
	bound time.Duration
	// grace starts the goroutine that gives it up (watchNext) adoptGrace
	// after the release; adoption stops it.
	grace *time.Timer
}

// adoptGrace is how long a next wait stays unwatched after its release: a
// LockMulti that adopts it within that time costs no goroutine. A wake-up
// that reaches the record meanwhile is passed on at most that much later.
const adoptGrace = time.Millisecond

// States of a nextWait.
const (
	nextParked  = iota
	nextAdopted // a LockMulti waits with it
	nextGivenUp // its goroutine removes its record
)

// nextWaits are a Locker's next waits that no LockMulti has adopted yet,
// by store key.
type nextWaits struct {
	mu sync.Mutex
	m  map[string]*nextWait
	// graced are the next waits whose grace timer has not started their
	// goroutine; closed is set by watchAll: later ones start theirs at
	// once.
	graced map[*nextWait]struct{}
	closed bool
	// grace is adoptGrace unless a test sets it; watched counts the
	// goroutines watchNext started.
	grace   time.Duration
	watched atomic.Int64
}

// park registers a next wait for the store keys of a release (of a fair
// Locker, or of an unfair one whose streak of deferred wake-ups ended, see
// multi_defer.go), and keeps keys; or returns nil when a key's channel is
// not subscribed (the Locker has not waited for it lately, or has no
// pub/sub): then the release records nothing.
func (d *redisDriver) park(keys []string) *nextWait {
	if d.poll.Load() {
		return nil
	}
	for _, k := range keys {
		if !d.notify.subscribedOrClosed(k) {
			return nil
		}
	}
	wid := d.waits.Add(1)
	field := watchField(d.lid, wid)
	nw := &nextWait{field: field, w: newMultiWaiter(fieldWid(field)), adopted: make(chan struct{}), keys: keys, regs: make([]registration, len(keys))}
	for i, k := range keys {
		if ok, _ := d.notify.add(k, &nw.w, true, &nw.regs[i]); !ok {
			nw.leave()
			return nil
		}
	}
	return nw
}

// leave unregisters nw's waiter.
func (nw *nextWait) leave() {
	for i := range nw.regs {
		nw.regs[i].leave()
	}
}

// recorded notes that the release recorded nw with store key: unless a
// LockMulti adopts it within adoptGrace, a goroutine then gives it up
// unless one adopts it within bound.
func (d *redisDriver) recorded(key string, nw *nextWait, bound time.Duration) {
	nw.key, nw.bound = key, bound
	d.next.mu.Lock()
	if d.next.m == nil {
		d.next.m = map[string]*nextWait{}
		d.next.graced = map[*nextWait]struct{}{}
	}
	// A wait it replaces keeps its grace timer or goroutine, which gives
	// it up.
	d.next.m[key] = nw
	closed := d.next.closed
	if !closed {
		d.next.graced[nw] = struct{}{}
		grace := d.next.grace
		if grace == 0 {
			grace = adoptGrace
		}
		nw.grace = time.AfterFunc(grace, func() { d.graceOver(nw) })
	}
	d.next.mu.Unlock()
	if closed && !d.watchNext(nw) {
		d.giveUp(nw.key, nw)
	}
}

// graceOver starts the goroutine of nw, unless a LockMulti adopted it or
// watchAll started it.
func (d *redisDriver) graceOver(nw *nextWait) {
	d.next.mu.Lock()
	_, ok := d.next.graced[nw]
	delete(d.next.graced, nw)
	spawned := !ok || nw.state.Load() != nextParked || d.watchNext(nw)
	d.next.mu.Unlock()
	if !spawned {
		d.giveUp(nw.key, nw)
	}
}

// watchAll starts the goroutine of every next wait in its grace time, for
// Close: the notifier's close, which follows, stops them and waits until
// they gave their records up. Later next waits start theirs at once.
func (d *redisDriver) watchAll() {
	d.next.mu.Lock()
	d.next.closed = true
	var left []*nextWait
	for nw := range d.next.graced {
		delete(d.next.graced, nw)
		nw.grace.Stop()
		if !d.watchNext(nw) {
			left = append(left, nw)
		}
	}
	d.next.mu.Unlock()
	for _, nw := range left {
		d.giveUp(nw.key, nw)
	}
}

// adoptedNext stops the grace timer of nw, which a LockMulti adopted.
func (d *redisDriver) adoptedNext(nw *nextWait) {
	d.next.mu.Lock()
	if _, ok := d.next.graced[nw]; ok {
		delete(d.next.graced, nw)
		nw.grace.Stop()
	}
	d.next.mu.Unlock()
}

// watchNext starts the goroutine that gives nw up unless a LockMulti
// adopts it within nw.bound, and reports whether it started: not after
// the notifier's close (then the caller gives nw up).
func (d *redisDriver) watchNext(nw *nextWait) bool {
	d.next.watched.Add(1)
	return d.notify.spawn(func(stop <-chan struct{}) {
		timer := time.NewTimer(nw.bound)
		defer timer.Stop()
		select {
		case <-nw.w.wake:
			// A release reached the record, or a message woke every
			// waiter of the key.
		case <-timer.C:
		case <-stop:
			// Closed, or pub/sub refused.
		case <-nw.adopted:
			return
		}
		if nw.state.CompareAndSwap(nextParked, nextGivenUp) {
			d.giveUp(nw.key, nw)
			return
		}
		// Adopted meanwhile: the wake-up is the wait's.
		select {
		case nw.w.wake <- struct{}{}:
		default:
		}
	})
}

// giveUp removes nw, the record of store key, and wakes the next record
// when a release consumed nw's and the key is free (multi_giveup.lua).
func (d *redisDriver) giveUp(key string, nw *nextWait) {
	nw.state.Store(nextGivenUp)
	d.next.mu.Lock()
	if d.next.m[key] == nw {
		delete(d.next.m, key)
	}
	d.next.mu.Unlock()
	nw.leave()
	d.giveUpRecords(context.Background(), []string{key}, nw.field)
}

// giveUpRecords removes the record field from the waiters hash of each
// store key, in one pipeline of multi_giveup.lua, which wakes the next
// record of a free key whose record a release consumed. It gives up
// within cleanupTimeout, or when ctx ends, and returns the keys whose call
// failed.
func (d *redisDriver) giveUpRecords(ctx context.Context, keys []string, field string) (failed []string) {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	calls := make([]evalCall, len(keys))
	for i, k := range keys {
		nm := d.lockNames(k)
		calls[i] = evalCall{script: d.multiGiveUp, keys: []string{nm.keys[0], nm.keys[3]}, args: []any{field, nm.channelArg}}
	}
	for i, c := range evalPipelined(ctx, d.client, calls) {
		v, err := c.Result()
		switch {
		case err != nil:
			failed = append(failed, keys[i])
			d.logger.Debug("locker: redis: could not give up a LockMulti's record", "err", err)
		case v == int64(3):
			d.noPubSub(errPublishRefused)
		}
	}
	return failed
}

// adoptNext returns the waiter of the wait of call: a next wait that a
// release recorded with one of the keys of reqs, which it adopts (then
// call's record is that one, written by attempt 1), or a new one.
func (d *redisDriver) adoptNext(reqs []driver.Request, call *multiCall) (*waiter, *nextWait) {
	if d.poll.Load() {
		return newWaiterFor(call), nil
	}
	var adopted *nextWait
	for j, r := range reqs {
		d.next.mu.Lock()
		nw := d.next.m[r.Key]
		if nw != nil {
			delete(d.next.m, r.Key)
		}
		d.next.mu.Unlock()
		if nw == nil || adopted != nil || !nw.state.CompareAndSwap(nextParked, nextAdopted) {
			continue // its goroutine gives it up
		}
		close(nw.adopted)
		d.adoptedNext(nw)
		call.args[3] = nw.field
		call.rec[j] = 1
		call.unwatchChanged()
		adopted = nw
	}
	if adopted == nil {
		return newWaiterFor(call), nil
	}
	return &adopted.w, adopted
}

// newWaiterFor returns a waiter for the wait of call.
func newWaiterFor(call *multiCall) *waiter {
	w := newMultiWaiter(call.wid())
	return &w
}

// newMultiWaiter returns the waiter of a LockMulti's wait named wid. It has
// no claimed channel: only a Lock's wait reads one, and the notifier's
// send to a nil one falls through.
func newMultiWaiter(wid string) waiter {
	return waiter{wake: make(chan struct{}, 1), wid: wid}
}
