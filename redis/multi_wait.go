package redis

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/golocker/locker/driver"
)

// AcquireMulti implements driver.MultiWaiter: a waiting LockMulti makes
// one-script attempts (TryAcquireMulti) and, between them, holds nothing.
// An attempt that finds a key held records the wait with that key, under
// a field of its own, and the release that frees the key consumes the
// first record and wakes its Locker with "free <wid> <seq>" on its channel
// (watch.lua), as a release wakes a waiter that counts as gone. The wait
// learns so which of its records are gone: its successful attempt removes
// only the others. The wait subscribes to the channels of all the keys:
// before the first attempt for the channels still subscribed from an
// earlier wait (so that no message between the attempt and the
// registration is lost), after it for the others (whose confirmation wakes
// the wait, so that a release before it is not missed).
//
// Between wake-ups it tries again every refreshInterval, or when the
// holder's remaining time runs out if that comes first. Without pub/sub it
// polls as Acquire does.
func (d *redisDriver) AcquireMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	call, err := d.newMultiCall(reqs, true)
	if err != nil {
		return nil, err
	}
	// The last release of one of the keys may have recorded this wait
	// already (multi_next.go): then it waits before its first attempt.
	w, adopted := d.adoptNext(reqs, call)
	// regs[i] holds the registration of w for reqs[i]'s key: the adopted
	// wait's, or one of its own once join made it. A set of at most
	// multiInline keys keeps them on the stack.
	var inline [multiInline]joined
	regs := inline[:min(len(reqs), multiInline)]
	if len(reqs) > multiInline {
		regs = make([]joined, len(reqs))
	}
	if adopted != nil {
		for k, key := range adopted.keys {
			if i := slices.IndexFunc(reqs, func(r driver.Request) bool { return r.Key == key }); i >= 0 {
				regs[i].adopted = &adopted.regs[k]
			} else {
				adopted.regs[k].leave()
			}
		}
	}
	defer func() {
		for i := range regs {
			regs[i].leave()
		}
	}()
	join := func(early bool) error {
		for i, r := range reqs {
			if regs[i].registered() || d.poll.Load() {
				continue
			}
			ok, err := d.notify.add(r.Key, w, early, &regs[i].own)
			if err != nil {
				return err
			}
			if ok && !early {
				d.notify.held(r.Key)
			}
		}
		return nil
	}
	if err := join(true); err != nil {
		return nil, err
	}
	refresh := refreshInterval(reqs[0].TTL)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt := 0; ; attempt++ {
		// A wait that a release recorded (adopted) waits before its first
		// attempt: that release wakes it when the keys are free.
		wait := driver.Jitter(refresh)
		if attempt > 0 || adopted == nil {
			sent := time.Now()
			if d.poll.Load() {
				call.args[3] = ""
			}
			call.setSeq(uint64(attempt) + 1)
			grants, err := d.runMulti(ctx, reqs, call)
			if err == nil {
				for i := range grants {
					grants[i].Since = sent
					grants[i].Queued = attempt > 0
				}
				return grants, nil
			}
			if !errors.Is(err, driver.ErrHeld) {
				if attempt > 0 {
					d.unwatch(ctx, reqs, call, true)
				}
				return nil, err
			}
			remaining := driver.Remaining(err)
			if d.poll.Load() {
				wait = d.pollDelay(attempt, remaining, min(pollCeiling, refresh))
			} else if remaining > 0 && remaining < refresh {
				wait = driver.Past(remaining)
			}
		}
		if err := join(false); err != nil {
			return nil, err
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-w.wake:
		case <-timer.C:
		case <-ctx.Done():
			d.unwatch(ctx, reqs, call, false)
			return nil, ctx.Err()
		}
		for _, f := range d.notify.takeFreed(w) {
			if i := slices.IndexFunc(reqs, func(r driver.Request) bool { return r.Key == f.key }); i >= 0 {
				call.consumed(i, f.seq)
			}
		}
	}
}

// unwatch removes the records the attempts of call may have left (see
// multi_acquire.lua) after a wait that ended without the keys, so that the
// next release of a key wakes a Locker that still waits: those of
// call.rec, or with all (after an error: a lost reply may hide a record)
// those of every key. It is best-effort, with a fresh context: a record
// left behind only delays one wake-up of the others, which try again by
// themselves.
func (d *redisDriver) unwatch(ctx context.Context, reqs []driver.Request, call *multiCall, all bool) {
	field, _ := call.args[3].(string)
	if field == "" || !all && !slices.ContainsFunc(call.rec, func(seq uint64) bool { return seq != 0 }) {
		return
	}
	if d.cuts(ctx) {
		// The caller returns when ctx ends (driver.Info.PromptCancel);
		// records left expire with their hash.
		if ended(ctx) != nil {
			return
		}
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), min(reqs[0].TTL, cleanupTimeout))
		defer cancel()
	}
	pipe := d.client.Pipeline()
	for i := range reqs {
		if all || call.rec[i] != 0 {
			pipe.HDel(ctx, call.keys[4*len(reqs)+i], field)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		d.logger.Debug("locker: redis: could not remove a LockMulti's wake-up records", "keys", len(reqs), "err", err)
	}
}

// joined is a LockMulti wait's registration for one key: the adopted next
// wait's (adopted), or its own once the wait registered itself. It holds
// no pointer to itself, so that an array of them may stay on the stack.
type joined struct {
	adopted *registration
	own     registration
}

// registered reports whether j holds a registration.
func (j *joined) registered() bool { return j.adopted != nil || j.own.n != nil }

// leave unregisters j's registration, once.
func (j *joined) leave() {
	j.adopted.leave()
	j.own.leave()
}
