package locker

import (
	"context"
	"errors"
	"fmt"

	"github.com/golocker/locker/driver"
)

// ForceUnlocker is implemented by Lockers that can free a key whoever holds
// it: every Locker [New] builds on a backend that can (all the built-in
// ones), and wrappers that pass it on.
type ForceUnlocker interface {
	ForceUnlock(ctx context.Context, key string) error
}

// ForceUnlock frees key in l's store whoever holds it, for operators (a
// hung holder, a lock kept for its [MinHold] that must end now). The key is
// the caller's, without the Locker's prefix. The waiters get the key as
// after an Unlock.
//
// The holder is not asked: it goes on running until it learns that its
// lock is lost, at its next renewal (a third of its TTL) at the latest,
// when its [Lock.Done] closes. Until then two holders run; the fencing
// token ([Lock.Token]) keeps the protected resource safe.
//
// It returns an error matching [ErrNotHeld] when nobody held the key, and
// one matching [errors.ErrUnsupported] for a Locker that is not a
// [ForceUnlocker] or whose backend cannot.
func ForceUnlock(ctx context.Context, l Locker, key string) error {
	if ctx == nil {
		return &Error{Op: "forceunlock", Key: key, Err: ErrInvalidOption, Cause: errNilContext}
	}
	f, ok := l.(ForceUnlocker)
	if !ok {
		return &Error{Op: "forceunlock", Key: key, Err: errors.ErrUnsupported, Cause: fmt.Errorf("%T cannot free a key it does not hold", l)}
	}
	return f.ForceUnlock(ctx, key)
}

// errNobodyHolds is the cause of ForceUnlock's ErrNotHeld.
var errNobodyHolds = errors.New("nobody holds the key")

// ForceUnlock implements ForceUnlocker.
func (e *engine) ForceUnlock(ctx context.Context, key string) error {
	const op = "forceunlock"
	b, ok := e.drv.(driver.Breaker)
	return e.keyCall(ctx, op, key, ok, "cannot free a key it does not hold", func(ctx context.Context, skey string) error {
		err := b.Break(ctx, skey)
		if errors.Is(err, driver.ErrNotHeld) {
			// The driver's text speaks of an owner; a forced
			// unlock has none.
			return e.err(op, key, ErrNotHeld, errNobodyHolds)
		}
		return err
	})
}

// keyCall is an operator's call on one key (ForceUnlock, SetLimit): it
// checks ctx and key, refuses with errors.ErrUnsupported, saying the
// backend "cannot" what, when the driver lacks the call (supported false),
// and runs call on the store key while the Locker is open, returning when
// ctx ends even if the store has not answered. An error of
// call that is not already a *Error is wrapped as op's.
func (e *engine) keyCall(ctx context.Context, op, key string, supported bool, cannot string, call func(ctx context.Context, skey string) error) error {
	if ctx == nil {
		return e.err(op, key, ErrInvalidOption, errNilContext)
	}
	if !supported {
		return e.err(op, key, errors.ErrUnsupported, fmt.Errorf("the %s backend %s", e.name, cannot))
	}
	skey, err := e.storeKey(op, key)
	if err != nil {
		return err
	}
	if !e.enter() {
		return e.err(op, key, ErrClosed, nil)
	}
	defer e.calls.Done()
	// Detached, as Lock's store calls are: it returns when ctx ends, and
	// the call finishes in the background (Close waits for it).
	_, err, gone := detached(e, ctx, ctx, func() (struct{}, error) { return struct{}{}, call(ctx, skey) }, nil)
	if gone {
		return e.err(op, key, nil, ctxCause(ctx))
	}
	var le *Error
	if err == nil || errors.As(err, &le) {
		return err
	}
	return e.err(op, key, nil, err)
}
