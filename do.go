package locker

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"time"
)

// Do waits for key, runs fn while holding it, and releases it.
//
// fn's ctx is derived from ctx and is cancelled, with a cause matching
// [ErrLost], the moment the lock is lost: fn should stop touching the shared
// state then. Its Err reports the loss once the lock's deadline has passed
// even when the Locker's goroutines run late: check it before each write. After fn returns the lock is released with a fresh context
// bounded by [DefaultReleaseTimeout], even when ctx was cancelled.
// When fn panics (or calls runtime.Goexit), Do releases the lock the same
// way before the panic goes on with its own value.
//
// Inside fn's ctx, Lock, TryLock, Do and TryDo on the same key through the
// same Locker return a nested hold at once; only Do's own release releases
// the lock. That holds only while fn runs: once Do returns, fn's ctx (kept
// by a goroutine fn started, or by a retry helper) is cancelled and
// confers nothing.
//
// Do returns fn's error; when the lock was lost while fn ran it also matches
// ErrLost (fn's work may not have been exclusive): one error, on one line,
// that errors.Is matches with either. When the key could not be acquired it
// returns Lock's error and fn is not run. A nil ctx, Locker or fn gives an
// error matching [ErrInvalidOption].
//
// opts configure the acquisition (see [LockOption]): with [MaxHold], fn's
// ctx is cancelled with a cause matching [ErrMaxHold] when it runs out;
// with [MinHold], the key stays claimed after fn returned early.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...LockOption) error {
	return do(ctx, "do", l, key, fn, true, opts)
}

// TryDo is Do without waiting: when key is held elsewhere it returns an error
// matching [ErrNotAcquired] and fn is not run. This is the "skip this tick"
// policy for jobs that run on many replicas but must run on one.
func TryDo(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...LockOption) error {
	return do(ctx, "trydo", l, key, fn, false, opts)
}

func do(ctx context.Context, op string, l Locker, key string, fn func(ctx context.Context) error, wait bool, opts []LockOption) error {
	switch {
	case ctx == nil:
		return &Error{Op: op, Key: key, Err: ErrInvalidOption, Cause: errNilContext}
	case l == nil:
		return &Error{Op: op, Key: key, Err: ErrInvalidOption, Cause: errors.New("nil Locker")}
	case fn == nil:
		return &Error{Op: op, Key: key, Err: ErrInvalidOption, Cause: errors.New("nil function")}
	}
	if outer, err := nestedIn(ctx, l, key); err != nil {
		return &Error{Op: op, Key: key, Err: ErrNotAcquired, Cause: err}
	} else if outer != nil {
		return fn(ctx)
	}
	return runAcquired(ctx, l, key, fn, func() (Lock, error) {
		if wait {
			return l.Lock(ctx, key, opts...)
		}
		return l.TryLock(ctx, key, opts...)
	})
}

// runAcquired takes a lock with acquire, runs fn while it is held, and
// releases it, as Do does. Inside fn's ctx the lock counts as l's hold on
// key (nil l: as nobody's, for a shared hold, which is never reentrant).
func runAcquired(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, acquire func() (Lock, error)) error {
	lk, err := acquire()
	if err != nil {
		return err
	}

	entry := &heldEntry{locker: l, key: key, lock: lk, next: heldList(ctx)}
	return runHeld(ctx, lk, []*heldEntry{entry}, fn)
}

// held is what Do and DoMulti hold while their function runs: a Lock or a
// MultiLock.
type held interface {
	Done() <-chan struct{}
	Err() error
	Unlock(ctx context.Context) error
}

// runHeld runs fn while h is held and releases h after it, as Do says.
// entries record h's keys in fn's ctx: entries[0].next is ctx's list and
// each later entry's next is the one before it.
func runHeld(ctx context.Context, h held, entries []*heldEntry, fn func(ctx context.Context) error) error {
	running := func(on bool) {
		for _, e := range entries {
			e.running.Store(on)
		}
	}
	running(true)
	cctx, cancel := context.WithCancelCause(context.WithValue(ctx, heldKey{}, entries[len(entries)-1]))
	fctx := &heldContext{Context: cctx, lock: h, cancel: cancel}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-h.Done():
			if err := h.Err(); err != nil {
				cancel(err)
			}
		case <-fctx.Done():
		}
	}()
	release := func() error {
		// From here on fctx, and every ctx derived from it that fn handed
		// out, confers nothing: it is cancelled, and no longer counts as a
		// hold.
		running(false)
		cancel(context.Canceled)
		<-watched
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
		defer ucancel()
		return h.Unlock(uctx)
	}
	returned := false
	defer func() {
		// fn panicked or called runtime.Goexit: release the key and let the
		// panic go on untouched (same value, same stack), so that a caller
		// that recovers (net/http does) does not keep the key held.
		if !returned {
			_ = release()
		}
	}()
	fnErr := fn(fctx)
	returned = true
	uerr := release()
	if lost := h.Err(); lost != nil {
		return join(fnErr, lost)
	}
	if errors.Is(uerr, ErrNotHeld) {
		// Nothing releases Do's own lock before Do does but a loss the
		// Locker had not noticed yet (deleted or taken over behind its
		// back since the last renewal).
		return join(fnErr, lostAtRelease{uerr})
	}
	return join(fnErr, uerr)
}

// lostAtRelease is the error of a release that found the lock gone: it
// matches ErrLost as well as the release's own error.
type lostAtRelease struct{ err error }

func (e lostAtRelease) Error() string   { return "lock lost before its release: " + e.err.Error() }
func (e lostAtRelease) Unwrap() []error { return []error{ErrLost, e.err} }

// heldContext is the ctx of Do's function. A goroutine cancels it when the
// lock is lost; Done and Err also ask the lock first, so that a loss shows
// the moment fn asks even when that goroutine has not run yet (a starved
// process, where the lock's own Done closes when asked past its deadline).
type heldContext struct {
	context.Context
	lock   held
	cancel context.CancelCauseFunc
}

// Done implements context.Context.
func (c *heldContext) Done() <-chan struct{} {
	c.sync()
	return c.Context.Done()
}

// Err implements context.Context.
func (c *heldContext) Err() error {
	c.sync()
	return c.Context.Err()
}

// sync cancels the ctx when the lock was lost.
func (c *heldContext) sync() {
	select {
	case <-c.lock.Done():
		if err := c.lock.Err(); err != nil {
			c.cancel(err)
		}
	default:
	}
}

// errNilContext is the cause of the ErrInvalidOption returned for a nil ctx.
var errNilContext = errors.New("nil context.Context")

// heldKey is the context key under which Do records the locks it holds.
type heldKey struct{}

// heldEntry is one lock held by a Do up the call chain.
type heldEntry struct {
	locker Locker
	key    string
	lock   Lock
	next   *heldEntry
	// running is true while Do's function runs: a ctx kept past Do's
	// return must not confer the hold.
	running atomic.Bool
}

func heldList(ctx context.Context) *heldEntry {
	if ctx == nil {
		return nil
	}
	e, _ := ctx.Value(heldKey{}).(*heldEntry)
	return e
}

// nestedIn returns the lock on key that a Do up ctx's call chain holds
// through l while its function runs, or nil. It returns an error (the
// cause of an ErrNotAcquired) when that lock was lost.
func nestedIn(ctx context.Context, l Locker, key string) (Lock, error) {
	return liveHold(ctx, func(e *heldEntry) bool { return e.key == key && sameLocker(e.locker, l) })
}

// liveHold returns the lock of the first entry up ctx's chain that match
// accepts and whose Do still runs its function, or the error that ended it.
func liveHold(ctx context.Context, match func(*heldEntry) bool) (Lock, error) {
	for e := heldList(ctx); e != nil; e = e.next {
		if !e.running.Load() || !match(e) {
			continue
		}
		select {
		case <-e.lock.Done():
			if err := e.lock.Err(); err != nil {
				return nil, err
			}
			return nil, errors.New("the enclosing Do's lock is no longer held")
		default:
		}
		if ctx.Err() != nil {
			return nil, ctxCause(ctx)
		}
		return e.lock, nil
	}
	return nil, nil
}

// ctxCause is ctx's error joined with its cause when that says more.
func ctxCause(ctx context.Context) error {
	err := ctx.Err()
	if c := context.Cause(ctx); c != nil && c != err {
		return join(err, c)
	}
	return err
}

// sameLocker compares two Lockers without panicking on uncomparable types.
func sameLocker(a, b Locker) bool {
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	return a == b
}

// nestedLock is a reentrant hold: it shares the outer lock's key, token and
// Done, and its Unlock only ends the nested hold.
type nestedLock struct {
	outer    Lock
	released atomic.Bool
}

func (n *nestedLock) Key() string           { return n.outer.Key() }
func (n *nestedLock) Token() uint64         { return n.outer.Token() }
func (n *nestedLock) Done() <-chan struct{} { return n.outer.Done() }
func (n *nestedLock) Deadline() time.Time   { return n.outer.Deadline() }
func (n *nestedLock) Err() error            { return n.outer.Err() }

func (n *nestedLock) Unlock(context.Context) error {
	if !n.released.CompareAndSwap(false, true) {
		return &Error{Op: "unlock", Key: n.Key(), Err: ErrNotHeld, Cause: errors.New("nested hold already released")}
	}
	select {
	case <-n.outer.Done():
		return &Error{Op: "unlock", Key: n.Key(), Err: ErrNotHeld, Cause: n.outer.Err()}
	default:
		return nil
	}
}
