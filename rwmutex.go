package locker

import "context"

// RWMutex is a read-write lock on one key of a store: any number of
// readers at once, or one writer alone, across every Locker on that store.
// Every read or write hold is a [Lock]: renewed with its Locker's locks,
// lost when renewals fail, released by Unlock and Close, and back in the
// store within one TTL after its holder crashed. Tokens of read and write
// holds come from one sequence: a writer's token is greater than every
// earlier reader's and writer's, so a store guarded by it refuses a stale
// writer.
//
// Where the store queues, a waiting writer blocks the readers that come
// after it, so that a stream of readers cannot starve it.
//
// An RWMutex is safe for concurrent use. Holds are never reentrant: a
// goroutine holding a read hold that asks for a write hold waits for
// itself until its ctx ends.
type RWMutex struct {
	l   SharedLocker
	key string
}

// NewRWMutex returns the read-write lock on key, through l. It does no
// store work.
//
// It returns an error matching [ErrInvalidOption] for a nil Locker or a
// Locker whose backend has no shared holds (the message names the backend).
func NewRWMutex(l Locker, key string) (*RWMutex, error) {
	sl, err := sharedLocker("newrwmutex", l, key)
	if err != nil {
		return nil, err
	}
	return &RWMutex{l: sl, key: key}, nil
}

// Key returns the lock's key.
func (m *RWMutex) Key() string { return m.key }

// RLock waits for a read hold and takes it. It fails like [Locker.Lock].
func (m *RWMutex) RLock(ctx context.Context, opts ...LockOption) (Lock, error) {
	return m.l.LockShared(ctx, m.key, Share{Mode: Read}, opts...)
}

// TryRLock takes a read hold if no writer holds or waits now; otherwise
// it returns an error matching [ErrNotAcquired].
func (m *RWMutex) TryRLock(ctx context.Context, opts ...LockOption) (Lock, error) {
	return m.l.TryLockShared(ctx, m.key, Share{Mode: Read}, opts...)
}

// Lock waits for the write hold and takes it. It fails like [Locker.Lock].
func (m *RWMutex) Lock(ctx context.Context, opts ...LockOption) (Lock, error) {
	return m.l.LockShared(ctx, m.key, Share{Mode: Write}, opts...)
}

// TryLock takes the write hold if nobody holds the key now; otherwise it
// returns an error matching [ErrNotAcquired].
func (m *RWMutex) TryLock(ctx context.Context, opts ...LockOption) (Lock, error) {
	return m.l.TryLockShared(ctx, m.key, Share{Mode: Write}, opts...)
}

// RDo waits for a read hold, runs fn while holding it, and releases it, as
// [Do] does with a lock.
func (m *RWMutex) RDo(ctx context.Context, fn func(ctx context.Context) error, opts ...LockOption) error {
	return sharedDo(ctx, "rwmutex.rdo", m.key, fn, func() (Lock, error) { return m.RLock(ctx, opts...) })
}

// TryRDo is RDo without waiting: an error matching [ErrNotAcquired], and
// fn not run, when a writer holds or waits.
func (m *RWMutex) TryRDo(ctx context.Context, fn func(ctx context.Context) error, opts ...LockOption) error {
	return sharedDo(ctx, "rwmutex.tryrdo", m.key, fn, func() (Lock, error) { return m.TryRLock(ctx, opts...) })
}

// Do waits for the write hold, runs fn while holding it, and releases it,
// as [Do] does with a lock.
func (m *RWMutex) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...LockOption) error {
	return sharedDo(ctx, "rwmutex.do", m.key, fn, func() (Lock, error) { return m.Lock(ctx, opts...) })
}

// TryDo is Do without waiting: an error matching [ErrNotAcquired], and fn
// not run, when the key is held.
func (m *RWMutex) TryDo(ctx context.Context, fn func(ctx context.Context) error, opts ...LockOption) error {
	return sharedDo(ctx, "rwmutex.trydo", m.key, fn, func() (Lock, error) { return m.TryLock(ctx, opts...) })
}
