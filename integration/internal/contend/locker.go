package contend

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/golocker/locker"
)

// Locker is the Impl of this library: newLocker returns a Locker of its own
// (its own client) for each client of a scenario.
func Locker(newLocker func(b *testing.B) locker.Locker) Impl {
	return Impl{Name: "locker", New: func(b *testing.B, key string) Mutex {
		return lockerMutex{l: newLocker(b), key: key}
	}}
}

type lockerMutex struct {
	l   locker.Locker
	key string
}

func (m lockerMutex) Lock(ctx context.Context) (func(context.Context) error, error) {
	lk, err := m.l.Lock(ctx, m.key)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return checkedUnlock(ctx, lk) }, nil
}

// ErrAllowedLoss marks an Unlock that found the lock gone as the Locker's
// contract allows: the run counts it and goes on, where any other Unlock
// error fails it.
var ErrAllowedLoss = errors.New("lock lost as the contract allows")

// heldLock is what checkedUnlock needs of a locker.Lock or a
// locker.MultiLock.
type heldLock interface {
	Unlock(ctx context.Context) error
	Deadline() time.Time
}

// checkedUnlock unlocks lk. An ErrNotHeld that the contract allows also
// matches ErrAllowedLoss: the lock was lost before the call (its Done was
// closed; the error matches ErrLost), or the store found it gone once its
// Deadline had passed (a stall of the store or of this process outlasted
// the validity the store granted). A key gone while its Deadline was still
// ahead is a fault: the store let it go while the holder counted on it.
func checkedUnlock(ctx context.Context, lk heldLock) error {
	err := lk.Unlock(ctx)
	if errors.Is(err, locker.ErrNotHeld) && (errors.Is(err, locker.ErrLost) || !time.Now().Before(lk.Deadline())) {
		return fmt.Errorf("%w: %w", ErrAllowedLoss, err)
	}
	return err
}

// Func adapts a pair of functions to a Mutex.
type Func func(ctx context.Context) (unlock func(context.Context) error, err error)

// Lock implements Mutex.
func (f Func) Lock(ctx context.Context) (func(context.Context) error, error) { return f(ctx) }
