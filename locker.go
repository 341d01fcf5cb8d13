// Package locker is a distributed lock with pluggable backends: one small
// [Locker] interface, one lock engine shared by every backend, and an exported
// conformance suite (package conformance) that every backend must pass.
//
// A backend is chosen by one constructor call on the user's own client, for
// example redis.New(rdb), etcd.New(cli), mysql.New(db), zookeeper.New(conn,
// events) or memory.New(store); all return a [Locker]. Job code only sees
// [Locker], [Lock], [Do] and [TryDo], so dev and prod can use different stores.
// [LockMulti] and [DoMulti] take several keys at once, all or none.
//
// The reasons behind the design are in docs/design.md, and measurements in
// docs/benchmarks.md, of the repository
// (https://github.com/golocker/locker/tree/main/docs).
//
// # Guarantees
//
//   - Mutual exclusion, as strong as the store: a key is never granted to two
//     holders at once by one store while its clocks behave.
//   - Every [Lock] carries a fencing token ([Lock.Token]) that is strictly
//     greater than every token handed out earlier for the same key by the same
//     store, across Lockers and processes.
//   - [Lock.Done] closes before the store could give the key to anyone else.
//     The engine keeps a local deadline on the monotonic clock.
//     It counts from the moment the last successful acquire or renew request was sent.
//     The lock counts as lost when renewals have not succeeded by then.
//   - A cancelled or failed wait never leaves a waiter entry behind.
//   - Locks are renewed automatically (every TTL/3, all of a Locker's locks
//     together) until unlocked, lost, or the Locker is closed.
//
// # Semaphores and read-write locks
//
// [NewSemaphore] caps how many hold a key at once; [NewRWMutex] shares a key
// among readers and gives it to one writer alone. Each permit and each read
// or write hold is a [Lock] with every guarantee above. They need a backend
// whose driver is a driver.Sharer (memory so far); other Lockers refuse them
// with [ErrInvalidOption].
//
// # Limits
//
// It is NOT safe to assume that a lock is held until Unlock. A process pause
// (GC, swap, a stopped VM) longer than the TTL can let another holder in
// while the old one still runs. So can a store failover that loses writes.
// Done closes a tenth of the TTL before the store's expiry. It closes late
// if the process is starved of CPU for longer than that margin at that
// moment. Watch [Lock.Done] or the ctx that [Do] passes. For writes that
// must never land twice, send [Lock.Token] to the protected store and have
// it reject tokens lower than the highest it has seen.
//
// # Fencing
//
// Tokens are numbers, compared by the resource you protect:
//
//	UPDATE stock SET n = n - 1, fence = :token WHERE id = :id AND fence < :token
//
// A stale holder whose lock expired carries a lower token than the new holder,
// so its late write affects no row.
//
// # Errors
//
// Errors are sentinels wrapped in an [*Error] that records the operation, the
// backend and the key; test them with [errors.Is] and [errors.As]:
// [ErrNotAcquired], [ErrNotHeld], [ErrLost], [ErrClosed], [ErrInvalidKey].
// When a ctx ends while Lock waits, the error matches both ErrNotAcquired and
// ctx.Err().
//
// # URLs
//
// [Open] opens a Locker from a URL with the backend a [Mux] registered for
// its scheme. A bad URL gives an error matching [ErrBadURL] that names the
// problem and never contains a password.
//
// # Choosing a backend
//
// memory: one process only (tests, single-instance deployments). redis: the
// fastest; not consensus-backed, a failover can lose a lock. etcd and
// zookeeper: consensus-backed, FIFO waiters. mysql: when the database is the
// only shared store you have; it also keeps a record of each task's last run.
package locker

import (
	"context"
	"time"
)

// Locker hands out locks on string keys. It is safe for concurrent use by
// multiple goroutines. Lock, TryLock and Unlock return as soon as their ctx
// ends, whatever the store does. Store work they started then finishes in
// the background, and Close waits for it. A call whose ctx can never end
// (context.Background()) makes its store calls in its own goroutine, so
// Close ends it only as soon as the backend lets it.
type Locker interface {
	// Lock blocks until key is held by the caller, ctx ends, the Locker is
	// closed, or the backend fails. ctx bounds only the wait: cancelling it
	// after Lock returned neither releases nor loses the lock.
	//
	// Inside the ctx that [Do] or [TryDo] passes to its function, Lock on the
	// same key through the same Locker returns a nested hold at once, while
	// that function runs and its lock is held. A ctx kept past Do's return
	// confers nothing: it is cancelled, and a ctx derived from it with
	// context.WithoutCancel contends like any other.
	//
	// Errors match [ErrNotAcquired] (and ctx.Err()) when ctx ended first or
	// had ended already, [ErrInvalidOption] for a nil ctx, [ErrClosed] after
	// Close, [ErrInvalidKey] for a key the backend cannot store, or wrap the
	// backend's error.
	//
	// opts configure this acquisition (see [LockOption]: [MinHold],
	// [MaxHold], [TTL]).
	Lock(ctx context.Context, key string, opts ...LockOption) (Lock, error)

	// TryLock makes one attempt and returns an error matching
	// [ErrNotAcquired] when the key is held elsewhere. Other errors are as for
	// Lock.
	TryLock(ctx context.Context, key string, opts ...LockOption) (Lock, error)

	// Close ends every held lock at once (its Done closes, its Err matches
	// [ErrLost] and [ErrClosed]) whatever the store is doing, ends every
	// wait with [ErrClosed], cuts short the store calls in progress, stops
	// every goroutine of the Locker and waits for them, then releases the
	// locks in the store best-effort: all within one release timeout (see
	// WithReleaseTimeout), even when the store does not answer. It does not
	// close the user's client. Calls after the first return nil.
	Close() error
}

// Lock is a held lock. Its methods are safe for concurrent use.
type Lock interface {
	// Key returns the key as the caller gave it (without prefix).
	Key() string

	// Token returns the fencing token: strictly greater than every token
	// handed out earlier for the same key by the same store.
	Token() uint64

	// Done returns a channel that is closed once the lock is no longer held:
	// unlocked, lost, or its Locker closed. When the lock is lost, Done
	// closes before the store could give the key to anyone else. Called
	// after the Deadline, it returns a closed channel, even when the
	// Locker's own timer has not run yet (a process starved of CPU).
	Done() <-chan struct{}

	// Deadline returns the local deadline: when Done closes unless a
	// renewal succeeds first (at most its MaxHold end). It moves forward
	// with every renewal.
	Deadline() time.Time

	// Err returns nil while the lock is held or after Unlock (a store that
	// drops a lock while it is being released is no loss), and an error
	// matching [ErrLost] (wrapping the cause) once it was lost or its Locker
	// closed.
	Err() error

	// Unlock releases the lock. It returns an error matching [ErrNotHeld]
	// when the lock was already released or lost; it never releases someone
	// else's lock. Past the Deadline the lock is lost, whatever the store
	// still holds and however late the Locker's own timer runs: the error
	// matches ErrNotHeld and wraps the loss Err reports (matching
	// [ErrLost]), and the store's copy is released in the background, so
	// that the key frees before the store's TTL would free it. ctx bounds the store call; after Unlock returns, Done is
	// closed whatever the outcome. With a nil or ended ctx (a job's ctx at
	// shutdown) the lock is still released, in the background at once, and
	// the error says so (matching ctx.Err(), or [ErrInvalidOption] for nil).
	// When the outcome is unknown the Locker goes on releasing in the
	// background until Close.
	Unlock(ctx context.Context) error
}
