package redis

import (
	"context"
	"strconv"
	"time"

	"github.com/golocker/locker/driver"
)

// refreshInterval is how often a waiting Lock makes an attempt when nothing
// woke it: it keeps its place in the queue alive (a waiter silent for three
// intervals counts as gone) and catches a hand-over whose message it missed.
func refreshInterval(ttl time.Duration) time.Duration { return max(ttl/3, 10*time.Millisecond) }

// staleAfter is how long a waiter with a TTL of ttl may go without an
// attempt before it counts as gone: three of its refresh intervals.
func staleAfter(ttl time.Duration) time.Duration { return 3 * refreshInterval(ttl) }

// claimWindow is how long a hand-over claims the lock for its waiter
// unless it confirms (claim_ms in lib.lua).
const claimWindow = 500 * time.Millisecond

// wakeGap is how long after an unfair release woke a waiter ("free") the
// next unfair releases of the key do not wake it again (wake_gap_us in
// release.lua): a waiter woken in vain, the key taken by a Locker that barged
// in first, tries again by itself after wakeGap, so that a release in that
// gap is not missed.
const wakeGap = time.Millisecond

// pollWindow is how long the attempt of a polling waiter ("p<n>") spares it
// the wake-ups of releases (poll_us in acquire.lua).
const pollWindow = 2 * wakeGap

// starveAfter is how long an unfair waiter may stay first in the queue
// before a release hands the key over to it instead of freeing it
// (starve_us in release.lua), unless it is awake: a release woke it within
// wakeGap, or it polls. It is wakeGap: a waiter queued that long on a hot
// key has been passed over already, and on a key held longer the
// hand-over saves the woken waiter's attempt.
const starveAfter = wakeGap

// starveGap is how long after such a hand-over the key's releases barge
// again, whoever starves (starve_gap_us in release.lua): on a hot key, the
// waiters behind the first, queued as long and asleep, would otherwise be
// handed the key in turn at every release.
const starveGap = 10 * time.Millisecond

// Acquire implements driver.Acquirer: a waiting Lock queues in Redis and is
// handed the key by the release before it, without another attempt.
//
// Each attempt either takes the key or (held) records the waiter in the key's
// queue, in arrival order. Unlock of the holder hands the key over to the
// first live waiter in the same script (a new fencing token, and a claim
// window of at most 500 ms). When the waiter's Locker reads its inbox (its
// record's seq is "i<n>"), the script pushes "<owner> <seq> <token>
// <claim>" into that list, which only a writer of the store can write:
// the waiter takes the grant as it is, without a round trip. Its validity
// is the claim window, counted from the send time of attempt seq, whose
// record the hand-over read (so the hand-over came after it); the
// renewals extend it. A grant with less than half its claim left by then
// is confirmed by an attempt instead. Otherwise (no inbox: a Cluster,
// Config.Replicas, a server that refuses BLPOP) the script publishes
// "grant <owner> <seq> <token> <claim>" on the key's channel. The message
// is only a wake-up: anyone who may PUBLISH can forge one, so nothing in
// it is trusted. The waiter it names confirms with an attempt at once,
// which finds the lock its own, renews it to its TTL and returns the token
// Redis holds; the validity counts from that attempt. A waiter that died
// while queued never takes its grant: the claim runs out, and the next
// waiter in line tries again then: told by a message how long the claim
// lasts, unless its record says that it makes its next attempt by then
// anyway (its last attempt found the key held for less than the claim,
// as on a key that changes hands all the time). So a release wakes one
// waiter, and a dead waiter holds up the key for the claim window, not for
// a TTL.
//
// In unfair mode a release frees the key and wakes the first waiter
// ("free"), but not again within wakeGap of its last wake-up: a waiter woken
// in vain (a Locker barged in first) tries again after wakeGap by itself,
// which bounds its attempts on a hot key to about two per wakeGap instead
// of one per hand-off. A first waiter queued for starveAfter or longer that
// is not awake (woken within wakeGap, or polling) is handed the key as in
// fair mode: through the inbox when its record says so, else by "grant";
// at most once per 10 ms per key (starve_gap_us in release.lua).
// Such an attempt, less than a refresh interval after one that wrote the
// waiter's record, finds the waiter still queued and writes nothing (seq
// "k<n>"): its record lives three refresh intervals.
//
// Between messages the waiter makes an attempt every refreshInterval, or when
// the holder's remaining time runs out if that comes first (a crashed holder
// never releases), or when its subscription becomes active (a hand-over
// published before that would have been missed). On any return without the
// key it leaves the queue, and passes the key on if it was handed over to it
// meanwhile.
//
// Without pub/sub (Config.NoPubSub, or once the server refused it) the
// waiter polls: it sleeps the Locker's backoff with jitter, never past the
// holder's remaining time, and at most pollCeiling (or the refresh
// interval, when shorter), so that an attempt confirms a hand-over within
// its claim window. The queue keeps the order.
func (d *redisDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	var w *waiter
	var reg *registration
	defer func() { reg.leave() }()
	if !d.poll.Load() {
		// The first attempt may queue, and a hand-over published on a
		// subscription already active (lingering from an earlier wait)
		// must find the waiter: register before it in that case only.
		var err error
		w, reg, err = d.notify.register(req.Key, req.Owner, true)
		if err != nil {
			return driver.Grant{}, err
		}
	}
	unfair := d.unfairArg == "1"
	var grants <-chan inboxGrant
	if d.inbox != nil && d.replicas == 0 && (!unfair || w != nil) {
		// With Config.Replicas a grant counts only once WAIT confirmed
		// it, which the confirming attempt does. An unfair release hands
		// the key over only to a waiter that starves (starveAfter): an
		// unfair Lock reads its inbox when the key's channel is
		// subscribed already, that is, when the key was contended at
		// this Locker lately, so that an uncontended Lock pays nothing.
		if grants = d.inbox.register(req.Owner); grants != nil {
			defer d.inbox.unregister(req.Owner)
		}
	}
	var sentBuf [4]time.Time
	sent := sentBuf[:0] // sent[i]: when attempt i+1 was sent
	ttlArg, ttl := d.ttlArgs(req.TTL)
	names := d.lockNames(req.Key)
	argList := d.acquireArgs(req, ttlArg)
	args := &argList
	validity := time.Duration(ttl) * time.Millisecond
	refresh := refreshInterval(req.TTL)
	var seq uint64
	// recorded is when the attempt that last wrote this waiter's record
	// (unfair mode) was sent: its deadline is at least three refresh
	// intervals later.
	var recorded time.Time
	// recordedInbox: that attempt told the store that this waiter reads
	// its inbox ("i<n>"). An unfair attempt that writes nothing keeps
	// that record, so it is made only while the inbox is read.
	recordedInbox := false
	// answered is when the reply of the attempt that last wrote this
	// waiter's record came: the store stops counting the waiter its
	// stale time later.
	var answered time.Time
	woken := false // the last pause ended with a wake-up from the notifier
	// hot: unfair, the key changed hands between this waiter's last two
	// attempts, the last of which a wake-up prompted or promised to poll:
	// the next one promises to poll ("p<n>").
	hot := false
	var lastRemaining time.Duration
	// pollUntil: the releases before it may have spared this waiter
	// their wake-up, as its last polling attempt asked (pollWindow from
	// its reply; the script counts from before that): it polls on until
	// an attempt is sent after it.
	var pollUntil time.Time
	var timer *time.Timer
	var wakeAt time.Time // when timer fires
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := time.Now()
		seq++
		seqArg := strconv.FormatUint(seq, 10)
		inbox := grants != nil && d.inbox.usable()
		switch {
		case unfair && now.Sub(recorded) < refresh && (inbox || !recordedInbox):
			// The record is recent: still queued, the attempt
			// writes nothing, unless it promises to poll.
			if hot && !d.poll.Load() {
				seqArg = "p" + seqArg
			} else {
				seqArg = "k" + seqArg
			}
		case inbox:
			seqArg = inboxSeq(seq)
		}
		sent = append(sent, now)
		r, err := d.attempt(ctx, req, names, args, seqArg)
		if err != nil {
			return driver.Grant{}, err
		}
		if r <= 0 && seqArg[0] != 'k' && seqArg[0] != 'p' {
			recorded, answered = now, time.Now()
			recordedInbox = seqArg[0] == 'i'
		}
		if r > 0 {
			var state any = names
			if seq == 1 {
				state = d.firstState(names)
			}
			return driver.Grant{Token: uint64(r), Validity: validity, Since: now, State: state, Queued: seq > 1}, nil
		}
		remaining := time.Duration(max(-1-r, 0)) * time.Millisecond
		// A polling attempt ("p<n>") promised the next within wakeGap.
		// The key changed hands since the last attempt, at least
		// wakeGap before, when the holder has no less time left than it
		// had: after a wake-up in vain or a polling attempt, poll on
		// then, and stop once one holder keeps it (releases wake the
		// waiter again).
		promised := seqArg[0] == 'p'
		hot = (woken || promised) && remaining >= lastRemaining
		lastRemaining = remaining
		if promised {
			pollUntil = time.Now().Add(pollWindow)
		}
		promised = promised || now.Before(pollUntil)
		var wait time.Duration
		if d.poll.Load() {
			wait = d.pollDelay(int(seq-1), remaining, min(pollCeiling, refresh))
		} else {
			if w == nil {
				w, reg, err = d.notify.register(req.Key, req.Owner, false)
				if err != nil {
					return driver.Grant{}, d.leave(ctx, req, err)
				}
			}
			// Subscribe if not yet done: its confirmation wakes the
			// waiter, so that a hand-over published before is caught
			// by the next attempt.
			d.notify.held(req.Key)
			wait = driver.Jitter(refresh)
			if remaining > 0 && remaining < refresh {
				wait = driver.Past(remaining)
			}
			if (woken || promised) && wait > wakeGap {
				// Woken in vain, or promised to poll: releases in
				// the next wakeGap may not wake this waiter.
				wait = driver.Past(wakeGap)
			}
		}
		woken = false
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait) // Go 1.23+: drops a pending tick
		}
		wakeAt = time.Now().Add(wait)
		var wake <-chan struct{}
		var claimed <-chan time.Duration
		if w != nil { // nil when polling from the start
			wake, claimed = w.wake, w.claimed
		}
		for sleeping := true; sleeping; {
			sleeping = false
			select {
			case claim := <-claimed:
				// Handed over to another waiter: if it does not
				// confirm, the key is free once its claim runs out.
				if d := driver.Past(claim); time.Until(wakeAt) > d {
					timer.Reset(d)
					wakeAt = time.Now().Add(d)
				}
				sleeping = true
			case g := <-grants:
				if g.seq == 0 || g.seq > seq {
					woken = true // names no attempt of ours: confirm
					break
				}
				// The hand-over read the record of attempt g.seq: it
				// came after that attempt was sent.
				since := sent[g.seq-1]
				if time.Until(since.Add(g.claim)) < g.claim/2 {
					woken = true // too little left to count on: confirm
					break
				}
				return driver.Grant{Token: g.token, Validity: g.claim, Since: since, State: names, Queued: true}, nil
			case <-wake:
				woken = true
			case <-timer.C:
			case <-ctx.Done():
				return driver.Grant{}, d.leaveWait(ctx, req, grants != nil, answered)
			}
		}
	}
}

// leaveWait is leaveBy for a wait of req whose ctx ended, whose attempt's
// reply at answered last wrote its record. A cleanup left to the engine
// (a driver.Residue: a Locker whose calls are cut runs none in the
// caller's goroutine) of a wait whose Locker reads its inbox (inboxed)
// goes to the inbox too, which runs it once it reads a grant for the
// waiter (see passOn): such a grant claims the key until the cleanup.
func (d *redisDriver) leaveWait(ctx context.Context, req driver.Request, inboxed bool, answered time.Time) error {
	err := d.leaveBy(ctx, req, ctx.Err(), answered, staleAfter(req.TTL))
	if r, ok := err.(*driver.Residue); ok && inboxed && r.Cleanup != nil {
		r.Cleanup = d.inbox.leave(req.Owner, r.Cleanup)
	}
	return err
}

// inboxSeq is the seq argument of attempt seq of a waiter whose Locker
// reads its inbox: "i<seq>", without an allocation for the first nine.
func inboxSeq(seq uint64) string {
	const first = "i1i2i3i4i5i6i7i8i9"
	if seq >= 1 && seq <= 9 {
		return first[2*(seq-1) : 2*seq]
	}
	return "i" + strconv.FormatUint(seq, 10)
}

// pollCeiling bounds a polling waiter's pause: a hand-over to it lasts
// claim_ms (lib.lua, 500 ms) unless it confirms, and an attempt takes a
// round trip besides the pause.
const pollCeiling = 200 * time.Millisecond

// pollDelay is the pause of a polling waiter after its attempt number
// attempt (from 0) found the key held for remaining more (0: unknown): the
// Locker's [driver.Backoff.Delay], kept under ceiling with jitter. The
// ceiling is pollCeiling, or the refresh interval when shorter (a short
// TTL): a waiter silent for three of those counts as gone.
func (d *redisDriver) pollDelay(attempt int, remaining, ceiling time.Duration) time.Duration {
	wait := d.backoff.Delay(attempt, remaining, false)
	if wait > ceiling {
		wait = driver.Jitter(ceiling)
	}
	return wait
}
