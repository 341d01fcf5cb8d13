package locker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// Mode is the kind of a shared hold.
type Mode uint8

// The kinds of shared hold.
const (
	// Permits takes Weight of the key's Limit permits (a [Semaphore]).
	Permits Mode = Mode(driver.Permits)
	// Read is a read hold (a [RWMutex]): shared with other reads.
	Read Mode = Mode(driver.Read)
	// Write is a write hold (a [RWMutex]): exclusive.
	Write Mode = Mode(driver.Write)
)

// String returns the mode's name.
func (m Mode) String() string { return driver.Mode(m).String() }

// Share describes a shared hold on a key: see [SharedLocker].
type Share struct {
	// Mode is the kind of hold.
	Mode Mode
	// Limit is the key's number of permits, for Permits; 0 otherwise.
	Limit int
	// Weight is how many permits the hold takes, for Permits; 0 means 1.
	Weight int
}

// SharedLocker is implemented by Lockers that hand out shared holds:
// every Locker [New] builds on a backend whose driver is a
// [driver.Sharer], and wrappers that pass it on. [NewSemaphore] and
// [NewRWMutex] use it; users call those.
//
// A shared hold is a [Lock] like any other: renewed with the Locker's
// locks, lost when renewals fail, released by Unlock and Close. It is
// never reentrant, and a key holds either plain locks or shared holds of
// one kind, never both.
type SharedLocker interface {
	// LockShared waits until the hold s describes fits, then takes it. It
	// fails like [Locker.Lock], and with an error matching
	// ErrInvalidOption when s is invalid or the key is in use another way.
	LockShared(ctx context.Context, key string, s Share, opts ...LockOption) (Lock, error)
	// TryLockShared is LockShared without waiting: ErrNotAcquired when the
	// hold does not fit now.
	TryLockShared(ctx context.Context, key string, s Share, opts ...LockOption) (Lock, error)
}

// errNoSharer is the cause of the ErrInvalidOption of a shared hold asked
// of a backend that cannot share a key.
func errNoSharer(backend string) error {
	return fmt.Errorf("the %s backend has no shared holds (semaphores, read-write locks): its driver does not implement driver.Sharer", backend)
}

// checkShare validates s and returns the driver's view of it.
func checkShare(s Share) (driver.Share, error) {
	ds := driver.Share{Mode: driver.Mode(s.Mode), Limit: s.Limit, Weight: s.Weight}
	switch s.Mode {
	case Permits:
		if ds.Weight == 0 {
			ds.Weight = 1
		}
		switch {
		case s.Limit <= 0:
			return ds, invalidOption("limit", "%d is not positive", s.Limit)
		case ds.Weight < 0:
			return ds, invalidOption("weight", "%d is not positive", s.Weight)
		case ds.Weight > s.Limit:
			return ds, invalidOption("weight", "%d is more than the limit %d: it could never be granted", ds.Weight, s.Limit)
		}
	case Read, Write:
		if s.Limit != 0 || (s.Weight != 0 && s.Weight != 1) {
			return ds, invalidOption("Share", "a %s hold has no limit and a weight of 1 (got limit %d, weight %d)", s.Mode, s.Limit, s.Weight)
		}
		ds.Weight = 1
	default:
		return ds, invalidOption("Share", "unknown mode %d", s.Mode)
	}
	return ds, nil
}

// LockShared implements SharedLocker.
func (e *engine) LockShared(ctx context.Context, key string, s Share, opts ...LockOption) (Lock, error) {
	return e.lockShared(ctx, "lockshared", key, true, s, opts)
}

// TryLockShared implements SharedLocker.
func (e *engine) TryLockShared(ctx context.Context, key string, s Share, opts ...LockOption) (Lock, error) {
	return e.lockShared(ctx, "trylockshared", key, false, s, opts)
}

func (e *engine) lockShared(ctx context.Context, op, key string, wait bool, s Share, opts []LockOption) (Lock, error) {
	ds, err := checkShare(s)
	if err != nil {
		return nil, e.err(op, key, nil, err)
	}
	return e.lock(ctx, op, key, wait, &ds, opts)
}

// pollShared is the wait for a shared hold: [driver.Backoff.Poll] with the
// Locker's backoff, queued in the store where it queues. When the wait
// ends without a grant, what its refusals recorded is cleaned up: before
// it returns when the wait is over (see withdraw), in the background when
// the engine tries again after a store error.
func (e *engine) pollShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
	s.Queue = true
	var (
		queued error // the last refusal that recorded the waiter
		// answered is when the last refusal arrived, zero once an
		// attempt ended without an answer: such an attempt may still
		// reach the store, and renew the record, at any later time.
		answered time.Time
		unknown  bool
	)
	try := func(ctx context.Context) (driver.Grant, error) {
		g, err := e.sharer.TryAcquireShared(ctx, req, s)
		switch {
		case err == nil:
		case errors.Is(err, driver.ErrHeld):
			if residueOf(err) != nil {
				queued = err
			}
			if !unknown {
				answered = time.Now()
			}
		default:
			unknown, answered = true, time.Time{}
		}
		return g, err
	}
	g, err := driver.Backoff(e.cfg.backoff).Poll(ctx, try, e.subscriber(req.Key))
	// A record expires with the request's TTL unless an attempt renews it
	// (driver.Sharer): once every attempt was answered, it is gone a TTL
	// after the last answer (or with the session that holds it).
	var gone time.Time
	if !answered.IsZero() && req.TTL > 0 {
		gone = answered.Add(req.TTL)
	}
	switch {
	case err == nil || queued == nil || residueOf(err) != nil:
	case errors.Is(err, driver.ErrConflict) || permanent(err) || ctx.Err() != nil:
		e.withdraw(ctx, req.Key, queued, gone)
	default:
		e.keepResidue(req.Key, queued)
	}
	return g, err
}

// withdraw removes what a wait that is over left in line (the Residue of
// refusal) before the wait returns, so that no waiter behind it waits for
// it: under ctx, bounded by the release timeout, while ctx lasts. Once ctx
// ended, a driver whose calls are detached from their caller withdraws it
// there all the same (the caller has returned), and one whose calls run in
// the caller's goroutine leaves it to the background cleanup, so that the
// caller returns promptly, as does a Locker that is closing (Close runs it).
// What fails is left to the background cleanup. gone is when the record
// expires by itself (zero: unknown), which Close goes by (see runCleanups).
func (e *engine) withdraw(ctx context.Context, key string, refusal error, gone time.Time) {
	r := residueOf(refusal)
	if r == nil || r.Cleanup == nil {
		return
	}
	c := cleanup{key: key, residue: r.Cleanup, gone: gone}
	var cctx context.Context // nil: runCleanups bounds it under the Locker's ctx
	switch {
	case ctx.Err() == nil:
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, e.cfg.releaseTimeout)
		defer cancel()
	case e.inline || e.ctx.Err() != nil:
		e.addCleanup(c)
		return
	}
	for _, c := range e.runCleanups(cctx, []cleanup{c}) {
		e.addCleanup(c)
	}
}
