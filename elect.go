package locker

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker/driver"
)

// Elect campaigns for the leadership named key through l until ctx ends:
// whenever this replica wins, lead runs with a ctx that ends when the
// leadership is lost (cause matching [ErrLost]) or ctx ends; when lead
// returns, the leadership is given up and the replica campaigns again. At
// most one replica of all those electing on the same key and store leads
// at a time, as far as [Lock.Done] can tell (see the package doc's
// guarantees): lead should stop acting for the leader once its ctx ends.
//
// It returns when ctx ends (ctx's cause), or with the first error that no
// campaign can cure: a closed Locker, a bad key or option. A lead that
// returns an error is logged by nobody: wrap it to report it. opts
// configure each term as they configure [Do] (MaxHold bounds a term).
func Elect(ctx context.Context, l Locker, key string, lead func(ctx context.Context) error, opts ...LockOption) error {
	switch {
	case ctx == nil:
		return &Error{Op: "elect", Key: key, Err: ErrInvalidOption, Cause: errNilContext}
	case l == nil:
		return &Error{Op: "elect", Key: key, Err: ErrInvalidOption, Cause: errors.New("nil Locker")}
	case lead == nil:
		return &Error{Op: "elect", Key: key, Err: ErrInvalidOption, Cause: errors.New("nil function")}
	}
	for {
		began := time.Now()
		err := Do(ctx, l, key, lead, opts...)
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrInvalidOption) {
			return err
		}
		// A term that ended at once (a lead that returns straight away, a
		// store error) must not spin: campaign again after a pause.
		if pause := electPause - time.Since(began); pause > 0 && !driver.Sleep(ctx, driver.Jitter(pause)) {
			return context.Cause(ctx)
		}
	}
}

// electPause is the least time between two campaigns of one replica.
const electPause = 100 * time.Millisecond
