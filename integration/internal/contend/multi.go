package contend

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/golocker/locker"
)

// MultiKeys returns the keys the multi-key scenario takes together for
// one base key: three, so that the keys of a run never meet another run's.
func MultiKeys(key string) []string {
	return []string{key + ":a", key + ":b", key + ":c"}
}

// MultiKey runs the multi-key scenario: n clients loop take all of
// MultiKeys → read-modify-write of a shared counter → release all, for d
// per implementation, and reports them side by side (acquisitions/s of
// the whole set; a lost update fails b). Each Impl's Mutex on key takes
// MultiKeys(key).
func MultiKey(b *testing.B, impls []Impl, n int, d time.Duration) []Result {
	rs := alternate(b, impls, n, d, func(impl Impl) func(int) string {
		key := Keys(b, impl.Name, "multikey")
		return func(int) string { return key }
	}, true)
	report(b, impls, rs, "sets/s")
	return rs
}

// LockerMulti is the Impl of this library's locker.LockMulti: newLocker
// returns a Locker of its own for each client.
func LockerMulti(newLocker func(b *testing.B) locker.Locker) Impl {
	return Impl{Name: "locker", New: func(b *testing.B, key string) Mutex {
		l, keys := newLocker(b), MultiKeys(key)
		return Func(func(ctx context.Context) (func(context.Context) error, error) {
			m, err := locker.LockMulti(ctx, l, keys)
			if err != nil {
				return nil, fmt.Errorf("LockMulti: %w", err)
			}
			return m.Unlock, nil
		})
	}}
}
