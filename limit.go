package locker

import (
	"context"
	"errors"
	"fmt"

	"github.com/golocker/locker/driver"
)

// LimitSetter is implemented by Lockers that can change the limit of a
// semaphore's key in their store: every Locker [New] builds on a backend
// whose driver is a [driver.Limiter], and wrappers that pass it on.
type LimitSetter interface {
	SetLimit(ctx context.Context, key string, limit int) error
}

// SetLimit sets the limit of the semaphore on key in l's store to limit,
// for its holders and waiters. Holders keep their permits: when they hold
// more than the new limit, grants wait until enough of them end. A
// [Semaphore] whose limit differs from the new one then fails to acquire,
// naming both limits. A key with neither holders nor waiters keeps no limit
// in the store: the next holder's limit rules. The key is the caller's,
// without the Locker's prefix. Most callers use [Semaphore.SetLimit].
//
// It returns an error matching [ErrInvalidOption] for a limit that is not
// positive or a key held as a plain lock or a read-write lock, and one
// matching [errors.ErrUnsupported] for a Locker that is not a
// [LimitSetter] or whose backend cannot (the message names it).
func SetLimit(ctx context.Context, l Locker, key string, limit int) error {
	if ctx == nil {
		return &Error{Op: "setlimit", Key: key, Err: ErrInvalidOption, Cause: errNilContext}
	}
	ls, ok := l.(LimitSetter)
	if !ok {
		return &Error{Op: "setlimit", Key: key, Err: errors.ErrUnsupported, Cause: fmt.Errorf("%T cannot change a semaphore's limit", l)}
	}
	return ls.SetLimit(ctx, key, limit)
}

// SetLimit implements LimitSetter.
func (e *engine) SetLimit(ctx context.Context, key string, limit int) error {
	const op = "setlimit"
	if ctx != nil && limit <= 0 {
		return e.err(op, key, nil, invalidOption("limit", "%d is not positive", limit))
	}
	ls, ok := e.drv.(driver.Limiter)
	return e.keyCall(ctx, op, key, ok, "cannot change a semaphore's limit: its driver does not implement driver.Limiter", func(ctx context.Context, skey string) error {
		err := ls.SetLimit(ctx, skey, limit)
		if errors.Is(err, driver.ErrConflict) {
			return e.err(op, key, ErrInvalidOption, err)
		}
		return err
	})
}
