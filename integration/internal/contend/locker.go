package contend

import (
	"context"
	"testing"

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
	return lk.Unlock, nil
}

// Func adapts a pair of functions to a Mutex.
type Func func(ctx context.Context) (unlock func(context.Context) error, err error)

// Lock implements Mutex.
func (f Func) Lock(ctx context.Context) (func(context.Context) error, error) { return f(ctx) }
