package driver

import (
	"context"
	"errors"
)

// ErrNotAtomic is returned (wrapped) by [MultiAcquirer.TryAcquireMulti] when
// the keys cannot be taken in one store operation: too many for one
// transaction, or keys the store keeps apart (Redis Cluster keys in
// different hash slots). The store must be left untouched. The engine then
// takes the keys one by one, in byte order.
var ErrNotAtomic = errors.New("driver: keys cannot be taken in one operation")

// MultiAcquirer is implemented by drivers that can take several keys in one
// store operation, all or none. The engine uses it for locker.TryLockMulti
// and for the first attempt of locker.LockMulti. Each key granted is then an
// ordinary lock: renewed, released and kept one lease at a time.
type MultiAcquirer interface {
	// TryAcquireMulti makes one attempt to take every reqs[i].Key for
	// reqs[i].Owner, all or none. The keys are distinct and in byte order.
	// On success it returns one Grant per request, in order, each with the
	// key's own fencing token. It returns an error matching ErrHeld when
	// another owner holds any of the keys, ErrConflict when one is held by
	// shared holds, and ErrNotAtomic when the keys cannot go in one
	// operation; in all three cases it took none. When the outcome is
	// unknown it undoes every possible acquisition, at once or through a
	// [Residue], as TryAcquire does for one key.
	TryAcquireMulti(ctx context.Context, reqs []Request) ([]Grant, error)
}

// MultiReleaser is implemented by drivers that can release several locks in
// one store call (one pipeline, one transaction). The engine uses it for
// locker.MultiLock.Unlock.
type MultiReleaser interface {
	// ReleaseMulti releases every lease as [Driver.Release] releases one,
	// and returns one result per lease, in order, with Release's meaning:
	// errs[i] applies to ls[i]. A non-nil err means the whole call failed
	// with an unknown outcome. Each key released wakes its waiters, or is
	// handed over to one of them, as after Release.
	ReleaseMulti(ctx context.Context, ls []Lease) (errs []error, err error)
}

// MultiWaiter is implemented by MultiAcquirers that wait for several keys
// themselves, woken by the store when a key may be free, as an [Acquirer]
// waits for one. The engine then calls AcquireMulti for a waiting
// locker.LockMulti instead of calling TryAcquireMulti again and again.
type MultiWaiter interface {
	// AcquireMulti is TryAcquireMulti that waits while a key is held, and
	// tries again, until it takes every key, ctx ends, or the store fails.
	// Between attempts it holds nothing, and nothing it leaves in the
	// store holds up another caller. It returns an error wrapping
	// ctx.Err() when ctx ends. Each Grant's Since is the send time of the
	// attempt that took the keys.
	AcquireMulti(ctx context.Context, reqs []Request) ([]Grant, error)
}
