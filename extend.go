package locker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// Extender is implemented by Locks whose MaxHold and MinHold can change
// while they are held: every Lock of a Locker built by [New], and wrappers
// that pass it on.
type Extender interface {
	Extend(ctx context.Context, opts ...LockOption) error
}

// Extend changes what a held lock asked for at acquisition, counting from
// this call. [MaxHold](d) ends the lock d from now instead. [MinHold](d)
// keeps its key claimed until d from now instead; MinHold(0) drops it.
// Either may be raised or lowered. [Lock.Deadline], [Lock.Done] and the
// ctx that [Do] passes follow the new MaxHold.
//
// Extend renews the lock in the store first, with the TTL the new MinHold
// needs where the backend has a TTL per lock. The change takes effect only
// once the store confirmed that the lock is still held.
//
// Extend waits for the store's answer while the lock is held and ctx
// lives. A renewal cut short by the lock's local deadline is sent again
// when other renewals moved that deadline on meanwhile: no error of
// Extend is its own bound. Past the deadline, whether Extend was called
// then or the deadline passed while it waited, the lock is lost whatever
// the store says, and the error matches [ErrNotHeld] (and wraps the loss
// that [Lock.Err] reports). When ctx ends first, the error matches
// ctx.Err(), and the lock is still held unless Lock.Err says otherwise.
//
// Errors match [ErrNotHeld] when the lock is no longer held (unlocked,
// lost, ended by its MaxHold, its Locker closed). They match
// [ErrInvalidOption], naming the option, for a bad value, a [TTL] (a held
// lock's TTL cannot change), [WithData] (use [SetData]), a MaxHold that would end before the MinHold,
// or a MinHold the backend cannot honour, as Lock refuses it. They match
// [errors.ErrUnsupported] for a Lock that is not an [Extender] (a nested
// hold inside Do). Otherwise they wrap the store's error, and the lock's
// MaxHold and MinHold stay as they were. The store may still have renewed
// the lock (a renewal the replicas did not confirm, on Redis with
// Config.Replicas); that renewal extends nothing the caller relies on.
func Extend(ctx context.Context, lk Lock, opts ...LockOption) error {
	if lk == nil {
		return &Error{Op: "extend", Err: ErrInvalidOption, Cause: errors.New("nil Lock")}
	}
	x, ok := lk.(Extender)
	if !ok {
		return &Error{Op: "extend", Key: lk.Key(), Err: errors.ErrUnsupported, Cause: fmt.Errorf("%T cannot change its MaxHold or MinHold", lk)}
	}
	return x.Extend(ctx, opts...)
}

// Extend implements Extender.
func (l *handle) Extend(ctx context.Context, opts ...LockOption) error {
	h, e := l.h, l.h.e
	if ctx == nil {
		return e.err("extend", h.key, ErrInvalidOption, errNilContext)
	}
	c, err := applyLockOptions(opts)
	if err == nil && c.ttl != 0 {
		err = invalidOption("TTL", "a held lock's TTL cannot change")
	}
	if err == nil && c.dataSet {
		err = invalidOption("WithData", "a held lock's data changes with SetData")
	}
	if err == nil {
		err = e.checkMinHold(c.minHold, h.ttl)
	}
	if err != nil {
		return e.err("extend", h.key, nil, err)
	}
	if !e.enter() {
		return e.err("extend", h.key, ErrNotHeld, ErrClosed)
	}
	defer e.calls.Done()
	h.extending.Lock() // one Extend of a lock at a time
	defer h.extending.Unlock()
	h.overdue() // past its deadline the lock is lost, whatever the store says
	if h.claimed.Load() || h.ended.Load() {
		return e.err("extend", h.key, ErrNotHeld, l.Err())
	}

	now := time.Now()
	e.mu.Lock()
	minEnd, maxEnd := h.minHoldEnd, h.maxHoldEnd
	e.mu.Unlock()
	if c.minHoldSet {
		minEnd = time.Time{}
		if c.minHold > 0 {
			minEnd = now.Add(c.minHold)
		}
	}
	if c.maxHold > 0 {
		maxEnd = now.Add(c.maxHold)
	}
	if !minEnd.IsZero() && !maxEnd.IsZero() && maxEnd.Before(minEnd) {
		name := "MaxHold"
		if c.maxHold == 0 {
			name = "MinHold"
		}
		return e.err("extend", h.key, nil, invalidOption(name, "the MaxHold would end %v before the MinHold", minEnd.Sub(maxEnd).Round(time.Millisecond)))
	}

	// The store's answer: a renewal, with the TTL the new MinHold needs.
	lease := h.lease
	if e.perLockTTL {
		lease.TTL = storeTTLUntil(h.ttl, minEnd, now)
	}
	cctx, scope := e.callContext(ctx)
	defer scope.end()
	var (
		v    time.Duration
		sent time.Time
		gone bool
	)
	for {
		// The renewal is bounded by the lock's deadline: an answer after
		// it extends nothing. Renewals of the watchdog may move that
		// deadline on meanwhile; then the bound was no end of the lock,
		// and the renewal is sent again under the new one.
		e.mu.Lock()
		deadline := h.deadline
		e.mu.Unlock()
		rctx, cancel := context.WithDeadline(cctx, deadline)
		sent = time.Now()
		// Detached unless ctx can never end: PromptCancel does not cover
		// a renewal (see detach.go). A renewal left running extends
		// nothing.
		v, err, gone = detachedIf(e, ctx.Done() != nil, rctx, rctx, func() (time.Duration, error) { return e.renewOne(rctx, lease) }, nil)
		bounded := (gone || err != nil) && rctx.Err() != nil && cctx.Err() == nil
		cancel()
		if !bounded {
			break
		}
		h.overdue() // ends the lock if the deadline did not move
		if h.claimed.Load() || h.ended.Load() {
			return e.err("extend", h.key, ErrNotHeld, l.Err())
		}
	}
	switch {
	case gone && e.isClosed():
		return e.err("extend", h.key, ErrNotHeld, ErrClosed)
	case gone: // ctx ended
		return e.err("extend", h.key, nil, ctxCause(ctx))
	case errors.Is(err, driver.ErrNotHeld):
		h.lost(err)
		return e.err("extend", h.key, ErrNotHeld, err)
	case err != nil && e.isClosed():
		return e.err("extend", h.key, ErrNotHeld, ErrClosed)
	case err != nil && ctx.Err() != nil:
		return e.err("extend", h.key, nil, ctxCause(ctx))
	case err != nil:
		return e.err("extend", h.key, nil, err)
	}
	if v <= 0 {
		v = lease.TTL
	}

	e.mu.Lock()
	if h.ended.Load() || h.claimed.Load() {
		e.mu.Unlock()
		return e.err("extend", h.key, ErrNotHeld, l.Err())
	}
	h.minHoldEnd, h.maxHoldEnd = minEnd, maxEnd
	if !maxEnd.IsZero() {
		h.maxHold = maxEnd.Sub(h.acquired)
	}
	d := h.deadline
	if nd := sent.Add(safeValidity(v)); nd.After(d) {
		d = nd
	}
	h.setDeadline(d) // also when unchanged: the MaxHold end caps it
	e.mu.Unlock()
	e.poke()
	return nil
}

// renewOne renews one lease with the driver's Renew or RenewBatch.
func (e *engine) renewOne(ctx context.Context, l driver.Lease) (time.Duration, error) {
	if e.batcher == nil {
		return e.renewer.Renew(ctx, l)
	}
	v, errs, err := e.renewLeases(ctx, []driver.Lease{l})
	if err != nil {
		return 0, err
	}
	return v[0], errs[0]
}

// renewLeases renews ls in one RenewBatch where the driver batches, else
// one Renew after the other: each lease's validity and error, or an error
// for the whole.
func (e *engine) renewLeases(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	if e.batcher == nil {
		v, errs := make([]time.Duration, len(ls)), make([]error, len(ls))
		for i, l := range ls {
			v[i], errs[i] = e.renewer.Renew(ctx, l)
		}
		return v, errs, nil
	}
	v, errs, err := e.batcher.RenewBatch(ctx, ls)
	switch {
	case err != nil:
		return nil, nil, err
	case len(v) != len(ls) || len(errs) != len(ls):
		return nil, nil, errors.New("driver returned a batch result of the wrong length")
	}
	return v, errs, nil
}

// publicDeadline is the Lock's Deadline: the local deadline, or the
// MaxHold end when it comes first.
func (h *hold) publicDeadline() time.Time {
	h.e.mu.Lock()
	defer h.e.mu.Unlock()
	if !h.maxHoldEnd.IsZero() && h.maxHoldEnd.Before(h.deadline) {
		return h.maxHoldEnd
	}
	return h.deadline
}
