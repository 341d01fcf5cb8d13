package locker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// Semaphore is a counting semaphore on one key of a store: at most its
// limit of permits are held at once, across every Locker on that store.
// Every permit is a [Lock]: renewed with its Locker's locks, lost when
// renewals fail, released by Unlock and Close, and back in the store within
// one TTL after its holder crashed. Its token is a fencing token, strictly
// greater than every token handed out earlier for the key.
//
// The limit lives with the key: a Semaphore whose limit differs from the
// one of the key's current holders or waiters fails to acquire, with an
// error matching [ErrInvalidOption] that names both limits. Only
// [Semaphore.SetLimit] changes it. A key is a semaphore, a read-write lock
// or a plain lock, never two of them at once.
//
// A Semaphore is safe for concurrent use. Permits are never reentrant.
type Semaphore struct {
	l     SharedLocker
	owner Locker // l as the caller gave it, for SetLimit
	key   string
	limit atomic.Int64
}

// NewSemaphore returns the semaphore of limit permits on key, through l.
// It does no store work.
//
// It returns an error matching [ErrInvalidOption] for a nil Locker, a limit
// that is not positive, or a Locker whose backend has no shared holds (the
// message names the backend).
func NewSemaphore(l Locker, key string, limit int) (*Semaphore, error) {
	sl, err := sharedLocker("newsemaphore", l, key)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, &Error{Op: "newsemaphore", Key: key, Cause: invalidOption("limit", "%d is not positive", limit)}
	}
	s := &Semaphore{l: sl, owner: l, key: key}
	s.limit.Store(int64(limit))
	return s, nil
}

// sharedLocker returns l as a SharedLocker, or the error of op saying why
// it is not one.
func sharedLocker(op string, l Locker, key string) (SharedLocker, error) {
	if l == nil {
		return nil, &Error{Op: op, Key: key, Err: ErrInvalidOption, Cause: errors.New("nil Locker")}
	}
	if e, ok := l.(*engine); ok && e.sharer == nil {
		return nil, e.err(op, key, ErrInvalidOption, errNoSharer(e.name))
	}
	sl, ok := l.(SharedLocker)
	if !ok {
		return nil, &Error{Op: op, Key: key, Err: ErrInvalidOption, Cause: fmt.Errorf("%T has no shared holds: it is not a locker.SharedLocker", l)}
	}
	return sl, nil
}

// Key returns the semaphore's key.
func (s *Semaphore) Key() string { return s.key }

// Limit returns the semaphore's number of permits.
func (s *Semaphore) Limit() int { return int(s.limit.Load()) }

// SetLimit changes the limit of the semaphore's key to n, in the store and
// in s, as [SetLimit] does. Holders keep their permits. Other Semaphores on
// the key with the old limit then fail to acquire, naming both limits. So
// do waits in progress that asked with the old limit, on s too. It fails
// like SetLimit, and then leaves s's limit as it was.
func (s *Semaphore) SetLimit(ctx context.Context, n int) error {
	if err := SetLimit(ctx, s.owner, s.key, n); err != nil {
		return err
	}
	s.limit.Store(int64(n))
	return nil
}

// Acquire waits for one permit and takes it. It fails like [Locker.Lock].
func (s *Semaphore) Acquire(ctx context.Context, opts ...LockOption) (Lock, error) {
	return s.AcquireN(ctx, 1, opts...)
}

// TryAcquire takes one permit if one is free now; otherwise it returns an
// error matching [ErrNotAcquired].
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...LockOption) (Lock, error) {
	return s.TryAcquireN(ctx, 1, opts...)
}

// AcquireN waits for n permits and takes them as one Lock, whose Unlock
// gives all n back. An n that is not positive or above the limit fails
// with an error matching [ErrInvalidOption].
func (s *Semaphore) AcquireN(ctx context.Context, n int, opts ...LockOption) (Lock, error) {
	return s.l.LockShared(ctx, s.key, Share{Mode: Permits, Limit: s.Limit(), Weight: n}, opts...)
}

// TryAcquireN is AcquireN without waiting: an error matching
// [ErrNotAcquired] when n permits are not free now.
func (s *Semaphore) TryAcquireN(ctx context.Context, n int, opts ...LockOption) (Lock, error) {
	return s.l.TryLockShared(ctx, s.key, Share{Mode: Permits, Limit: s.Limit(), Weight: n}, opts...)
}

// Do waits for one permit, runs fn while holding it, and gives it back, as
// [Do] does with a lock: fn's ctx is cancelled with a cause matching
// [ErrLost] when the permit is lost, and the result also matches ErrLost
// then.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...LockOption) error {
	return sharedDo(ctx, "semaphore.do", s.key, fn, func() (Lock, error) { return s.Acquire(ctx, opts...) })
}

// TryDo is Do without waiting: when no permit is free it returns an error
// matching [ErrNotAcquired] and fn is not run.
func (s *Semaphore) TryDo(ctx context.Context, fn func(ctx context.Context) error, opts ...LockOption) error {
	return sharedDo(ctx, "semaphore.trydo", s.key, fn, func() (Lock, error) { return s.TryAcquire(ctx, opts...) })
}

// sharedDo is Do for a shared hold taken by acquire.
func sharedDo(ctx context.Context, op, key string, fn func(ctx context.Context) error, acquire func() (Lock, error)) error {
	switch {
	case ctx == nil:
		return &Error{Op: op, Key: key, Err: ErrInvalidOption, Cause: errNilContext}
	case fn == nil:
		return &Error{Op: op, Key: key, Err: ErrInvalidOption, Cause: errors.New("nil function")}
	}
	return runAcquired(ctx, nil, key, fn, acquire)
}
