package redis

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/golocker/locker/driver"
)

// refreshInterval is how often a waiting Lock makes an attempt when nothing
// woke it: it keeps its place in the queue alive (a waiter silent for three
// intervals counts as gone) and catches a hand-over whose message it missed.
func refreshInterval(ttl time.Duration) time.Duration { return max(ttl/3, 10*time.Millisecond) }

// sentRing remembers when the last attempts of a waiting Lock were sent, by
// attempt number: a hand-over names the last attempt the server had seen, and
// the lock's validity counts from the moment that attempt was sent.
type sentRing struct {
	seq   uint64
	times [8]time.Time
}

func (r *sentRing) next(now time.Time) uint64 {
	r.seq++
	r.times[r.seq%uint64(len(r.times))] = now
	return r.seq
}

func (r *sentRing) at(seq uint64) (time.Time, bool) {
	if seq == 0 || seq > r.seq || r.seq-seq >= uint64(len(r.times)) {
		return time.Time{}, false
	}
	return r.times[seq%uint64(len(r.times))], true
}

// Acquire implements driver.Acquirer: a waiting Lock queues in Redis and is
// handed the key by the release before it, without another attempt.
//
// Each attempt either takes the key or (held) records the waiter in the key's
// queue, in arrival order. Unlock of the holder hands the key over to the
// first live waiter in the same script (a new fencing token, and a claim
// window of at most 500 ms) and publishes "grant <owner> <seq> <token>
// <claim>" on the key's channel. The waiter it names takes the lock with
// the claim as its validity, counted from the moment attempt <seq> was sent
// (that attempt was processed before the hand-over, which set the expiry to
// the claim from then); its first renewal, due a quarter into the claim,
// renews it to the TTL. When that attempt is too old to leave a useful part
// of the claim, the waiter confirms with an attempt at once instead. A
// waiter that died while queued never renews: the claim runs out, and the
// other waiters, told by the same message how long the claim lasts, try
// again then. So a release wakes one waiter, costs it no extra round trip,
// and a dead waiter holds up the key for the claim window, not for a TTL.
//
// Between messages the waiter makes an attempt every refreshInterval, or when
// the holder's remaining time runs out if that comes first (a crashed holder
// never releases), or when its subscription becomes active (a hand-over
// published before that would have been missed). On any return without the
// key it leaves the queue, and passes the key on if it was handed over to it
// meanwhile.
func (d *redisDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	// The first attempt may queue, and a hand-over published on a
	// subscription already active (lingering from an earlier wait) must
	// find the waiter: register before it in that case only.
	w, unregister, err := d.notify.register(req.Key, req.Owner, true)
	if err != nil {
		return driver.Grant{}, err
	}
	defer func() {
		if unregister != nil {
			unregister()
		}
	}()
	ttlArg, ttl := d.ttlArgs(req.TTL)
	keys := scriptKeys(req.Key)
	validity := time.Duration(ttl) * time.Millisecond
	refresh := refreshInterval(req.TTL)
	var sent sentRing
	var timer *time.Timer
	var wakeAt time.Time // when timer fires
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := time.Now()
		seq := sent.next(now)
		r, err := d.attempt(ctx, req, keys, ttlArg, strconv.FormatUint(seq, 10))
		if err != nil {
			return driver.Grant{}, err
		}
		if r > 0 {
			return driver.Grant{Token: uint64(r), Validity: validity, Since: now, State: keys[0]}, nil
		}
		if w == nil {
			w, unregister, err = d.notify.register(req.Key, req.Owner, false)
			if err != nil {
				return driver.Grant{}, d.leave(ctx, req, err)
			}
		}
		// Subscribe if not yet done: its confirmation wakes the waiter, so
		// that a hand-over published before is caught by the next attempt.
		d.notify.held(req.Key)
		wait := refresh
		if rem := time.Duration(-1-r) * time.Millisecond; rem > 0 && rem < wait {
			wait = rem + time.Millisecond
		}
		wait -= rand.N(wait/4 + 1) // spread the waiters' attempts
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait) // Go 1.23+: drops a pending tick
		}
		wakeAt = time.Now().Add(wait)
		for sleeping := true; sleeping; {
			sleeping = false
			select {
			case g := <-w.grant:
				// Handed over. With most of the claim left, take it as
				// it is (the engine renews it a quarter into the claim);
				// otherwise the next attempt confirms it and renews it
				// to the TTL.
				if since, ok := sent.at(g.seq); ok && g.token > 0 && time.Since(since) < g.ttl/4 {
					return driver.Grant{Token: g.token, Validity: g.ttl, Since: since, State: keys[0]}, nil
				}
			case claim := <-w.claimed:
				// Handed over to another waiter: if it does not
				// confirm, the key is free once its claim runs out.
				if d := claim + time.Millisecond + rand.N(claim/8+1); time.Until(wakeAt) > d {
					timer.Reset(d)
					wakeAt = time.Now().Add(d)
				}
				sleeping = true
			case <-w.wake:
			case <-timer.C:
			case <-ctx.Done():
				return driver.Grant{}, d.leave(ctx, req, ctx.Err())
			}
		}
	}
}
