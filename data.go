package locker

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/golocker/locker/driver"
)

// MaxData is the most bytes of data a lock carries ([WithData], [SetData]).
const MaxData = 1024

// WithData stores data with the hold, for everyone who inspects the key:
// [Inspect], [List] and [Watch] report it in [Status.Data]. Use it for a
// small value such as the leader's address or a job's run id. The data
// is copied. Empty data means none. Data longer than [MaxData] bytes is
// refused. A backend that cannot store data, and a shared hold (a
// semaphore's permit, a read or write hold), refuse it. The data goes with
// the hold: it is gone once the key is free.
func WithData(data []byte) LockOption {
	return func(c *lockConfig) error {
		if err := checkData("WithData", data); err != nil {
			return err
		}
		c.data, c.dataSet = bytes.Clone(data), true
		if len(c.data) == 0 {
			c.data = nil
		}
		return nil
	}
}

// checkData refuses data longer than MaxData, naming option.
func checkData(option string, data []byte) error {
	if len(data) > MaxData {
		return invalidOption(option, "the data is %d bytes; a lock carries at most %d (MaxData)", len(data), MaxData)
	}
	return nil
}

// checkDataOption refuses WithData where the engine's backend cannot store
// it, and on a shared hold.
func (e *engine) checkDataOption(c lockConfig, shared bool) error {
	switch {
	case c.data == nil:
		return nil
	case e.dataSetter == nil:
		return invalidOption("WithData", "the %s backend cannot store data with a lock", e.name)
	case shared:
		return invalidOption("WithData", "shared holds (semaphore permits, read and write holds) carry no data")
	}
	return nil
}

// DataSetter is implemented by Locks whose data can change while they are
// held: every Lock of a Locker built by [New] on a backend that stores
// data, and wrappers that pass it on.
type DataSetter interface {
	SetData(ctx context.Context, data []byte) error
}

// SetData replaces the data stored with a held lock (see [WithData]): the
// leader proclaims a new address. The lock stays held, with the same
// token, and its expiry is unchanged. Empty data removes it. The data is
// copied.
//
// Errors match [ErrNotHeld] when the lock is no longer held (unlocked,
// lost, its Locker closed); the lock then counts as lost if the store
// said so. They match [ErrInvalidOption] for data longer than [MaxData]
// bytes. They match [errors.ErrUnsupported] for a Lock that is not a
// [DataSetter], a shared hold, or a backend that cannot store data. A
// nested hold inside Do changes the data of the lock it nests in. Otherwise they wrap the store's error, and the data
// may or may not have changed.
func SetData(ctx context.Context, lk Lock, data []byte) error {
	if lk == nil {
		return &Error{Op: "setdata", Err: ErrInvalidOption, Cause: errors.New("nil Lock")}
	}
	s, ok := lk.(DataSetter)
	if !ok {
		return &Error{Op: "setdata", Key: lk.Key(), Err: errors.ErrUnsupported, Cause: fmt.Errorf("%T cannot change its data", lk)}
	}
	return s.SetData(ctx, data)
}

// SetData implements DataSetter.
func (l *handle) SetData(ctx context.Context, data []byte) error {
	h, e := l.h, l.h.e
	switch {
	case ctx == nil:
		return e.err("setdata", h.key, ErrInvalidOption, errNilContext)
	case e.dataSetter == nil:
		return e.err("setdata", h.key, errors.ErrUnsupported, fmt.Errorf("the %s backend cannot store data with a lock", e.name))
	case h.shared:
		return e.err("setdata", h.key, errors.ErrUnsupported, errors.New("shared holds (semaphore permits, read and write holds) carry no data"))
	}
	if err := checkData("SetData", data); err != nil {
		return e.err("setdata", h.key, nil, err)
	}
	data = bytes.Clone(data)
	if len(data) == 0 {
		data = nil
	}
	if !e.enter() {
		return e.err("setdata", h.key, ErrNotHeld, ErrClosed)
	}
	defer e.calls.Done()
	if h.claimed.Load() || h.ended.Load() {
		return e.err("setdata", h.key, ErrNotHeld, l.Err())
	}
	cctx, scope := e.callContext(ctx)
	defer scope.end()
	h.extending.Lock() // one SetData or Extend of a lock at a time
	defer h.extending.Unlock()
	_, err, gone := detached(e, ctx, cctx, func() (struct{}, error) {
		return struct{}{}, e.dataSetter.SetData(cctx, h.lease, data)
	}, nil)
	switch {
	case gone && e.isClosed(), err != nil && e.isClosed():
		return e.err("setdata", h.key, ErrNotHeld, ErrClosed)
	case gone:
		return e.err("setdata", h.key, nil, ctxCause(ctx))
	case errors.Is(err, driver.ErrNotHeld):
		h.lost(err)
		return e.err("setdata", h.key, ErrNotHeld, err)
	case err != nil && ctx.Err() != nil:
		return e.err("setdata", h.key, nil, ctxCause(ctx))
	case err != nil:
		return e.err("setdata", h.key, nil, err)
	}
	return nil
}

// SetData implements DataSetter: the outer lock's data changes, until
// the nested hold is released.
func (n *nestedLock) SetData(ctx context.Context, data []byte) error {
	if n.released.Load() {
		return &Error{Op: "setdata", Key: n.Key(), Err: ErrNotHeld, Cause: errors.New("nested hold already released")}
	}
	return SetData(ctx, n.outer, data)
}
