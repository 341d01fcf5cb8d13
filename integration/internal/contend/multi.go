package contend

import (
	"context"
	"fmt"
	"testing"

	"github.com/golocker/locker"
)

// MultiKeys returns the keys the multi-key scenario takes together for
// one base key: three, so that the keys of a run never meet another run's.
// The scenario is OneKey with Impls whose Mutex on key takes all of
// MultiKeys(key).
func MultiKeys(key string) []string {
	return []string{key + ":a", key + ":b", key + ":c"}
}

// LockerMulti is the Impl, named name, of this library's locker.LockMulti:
// newLocker returns a Locker of its own for each client.
func LockerMulti(name string, newLocker func(b *testing.B) locker.Locker) Impl {
	return Impl{Name: name, New: func(b *testing.B, key string) Mutex {
		l, keys := newLocker(b), MultiKeys(key)
		return Func(func(ctx context.Context) (func(context.Context) error, error) {
			m, err := locker.LockMulti(ctx, l, keys)
			if err != nil {
				return nil, fmt.Errorf("LockMulti: %w", err)
			}
			return func(ctx context.Context) error { return checkedUnlock(ctx, m) }, nil
		})
	}}
}
