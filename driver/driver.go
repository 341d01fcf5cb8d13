// Package driver defines the small interfaces a lock backend implements so that
// the portable lock engine in package locker can turn it into a locker.Locker.
//
// Users never import this package: they call a backend's constructor (for
// example redis.New) and get a locker.Locker. Backend authors implement
// [Driver] and one of [Renewer] and [BatchRenewer], plus the optional
// interfaces their store can do better with. The engine finds them by type
// assertion, as database/sql finds driver.Pinger.
//
// # What the engine does, so drivers do not
//
// Key validation (empty keys, the driver's [Info.MaxKeyBytes]), the namespace
// prefix, the owner token, the renewal watchdog (one goroutine per Locker),
// the local deadline after which a lock counts as lost, Done/Err,
// reentrancy, Close bookkeeping, retries after store errors, error wrapping
// and logging. A driver only speaks to its store.
//
// # Renewing
//
// The engine renews every lock due in a tick with one [BatchRenewer.RenewBatch]
// call when the driver has it, and with one [Renewer.Renew] call per lock
// otherwise. A driver implements one of the two; it need not write Renew
// around RenewBatch. locker.New refuses a driver with neither.
//
// # Waiting
//
// A Lock that finds the key held waits in one of three ways, chosen by what
// the driver implements:
//
//   - Queue: an [Acquirer] owns the whole wait: the engine calls Acquire
//     instead of polling. Its waiters line up in the store, which grants the key in
//     order: etcd and ZooKeeper watch the waiter before, Redis hands the key
//     over on release, MySQL waits in line on a named lock. Where such a
//     driver must poll (Redis without pub/sub, MySQL without a connection
//     for its line), it calls [Backoff.Poll] or sleeps [Backoff.Delay] with
//     [Config.Backoff].
//   - Notify: with a [Notifier] (memory), the engine runs [Backoff.Poll],
//     which also wakes when the driver says the key may be free.
//   - Poll: with neither (Redlock, MySQL with PollOnly), the engine runs
//     [Backoff.Poll].
//
// A waiting locker.LockMulti repeats its [MultiAcquirer] attempt, holding
// nothing: a [MultiWaiter] owns that wait; otherwise the engine sleeps the
// backoff, woken by the [Notifier] when there is one.
//
// Every wait sleeps with [Sleep] and spreads its waiters with [Jitter] or
// [Past], so one formula decides how long a waiter sleeps.
//
// # Contract
//
// Every method may be called concurrently from several goroutines. Methods
// must not retry: the engine decides when to try again. Methods must honour
// ctx and return promptly when it ends. A method must never report success
// for an operation that did not happen; when the outcome is unknown (a
// network error after the request was sent) it returns an error that is not
// [ErrHeld] or [ErrNotHeld], and, for TryAcquire, undoes a possible
// acquisition (compare-and-delete with the request's owner token) at once
// or through a [Residue], so that no phantom holder is left until expiry.
// An undo must not be overtaken by the request it undoes, which the
// network may deliver late.
//
// # Holders, not keys
//
// A [Lease] names one holder: its key and its owner token. Renew,
// RenewBatch, Release and Keep act on that holder only. A store that lets
// several holders share a key (a semaphore, read holds) keeps this
// contract: each holder has its own owner token and its own lease.
//
// # Shared holds
//
// A [Sharer] grants semaphore permits and read or write holds of a
// read-write lock. Each is a lease like a lock's: renewed in the same batch,
// lost, released and kept by key and owner token. The engine waits for a
// shared hold with [Backoff.Poll], woken by the [Notifier] when there is
// one; the store queues the waiter where it can (see [Share.Queue]).
package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ErrHeld is returned (wrapped) by [Driver.TryAcquire] when the key is held by
// another owner. Use [Held] to also report how long the holder's claim still
// runs, so that waiters never sleep past it.
var ErrHeld = errors.New("driver: key held by another owner")

// ErrNotHeld is returned (wrapped) by [Renewer.Renew], [BatchRenewer.RenewBatch]
// and [Driver.Release] when the store says for certain that the lock is no
// longer this owner's (the key is gone, expired or owned by someone else).
// The engine then treats the lock as lost at once. Any other error is taken
// as transient: the engine retries renewals until the local deadline.
var ErrNotHeld = errors.New("driver: lock not held by this owner")

// ErrPermanent is wrapped by a driver's errors that no retry can cure: bad
// credentials, missing permissions, a store that refuses a command the
// driver needs. A waiting Lock returns such an error at once; it rides out
// every other store error (connection refused or reset, timeouts, no leader,
// a server restarting) until its ctx ends.
var ErrPermanent = errors.New("driver: permanent store failure")

// Permanent wraps err so that it matches [ErrPermanent] (nil stays nil).
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (p *permanentError) Error() string   { return p.err.Error() }
func (p *permanentError) Unwrap() []error { return []error{ErrPermanent, p.err} }

// Residue is returned (wrapped, with errors.As finding it) by TryAcquire and
// Acquire when an attempt failed and left state in the store that the
// driver could not remove at once: a queue entry, a waiter key. The engine
// then calls Cleanup in the background, with backoff, until it returns nil
// or an error matching [ErrNotHeld] (nothing left to remove), and a last
// time on Close, so that a waiter whose Lock call returned never holds up
// the waiters behind it for longer than the store is unreachable.
// Cleanup must be idempotent and must never remove another owner's state.
type Residue struct {
	// Err is the attempt's own error.
	Err error
	// Cleanup removes what the attempt left; ctx bounds one try.
	Cleanup func(ctx context.Context) error
	// Gone, when not zero, is when the store stops counting what Cleanup
	// removes (a waiter's place that expires). Once the Locker is closing,
	// the engine tries Cleanup only until then.
	Gone time.Time
}

// Error implements error.
func (r *Residue) Error() string { return r.Err.Error() }

// Unwrap returns the attempt's error.
func (r *Residue) Unwrap() error { return r.Err }

// HeldError is the error [Held] builds: the key is held by another owner whose
// claim lasts at most Remaining more (0 when unknown).
type HeldError struct {
	// Remaining is the longest the current holder's claim can last without
	// a renewal, as the store reports it; 0 means unknown.
	Remaining time.Duration
}

// Held returns an error matching [ErrHeld] that carries the holder's remaining
// time to live.
func Held(remaining time.Duration) error { return &HeldError{Remaining: remaining} }

// Error implements error.
func (e *HeldError) Error() string {
	if e.Remaining > 0 {
		return fmt.Sprintf("%v (expires in at most %v)", ErrHeld, e.Remaining)
	}
	return ErrHeld.Error()
}

// Is reports whether target is [ErrHeld].
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Remaining returns how long the holder's claim still runs according to err,
// or 0 when err does not say.
func Remaining(err error) time.Duration {
	var he *HeldError
	if errors.As(err, &he) {
		return he.Remaining
	}
	return 0
}

// Config is what the engine resolved from the user's options. It is handed to
// drivers implementing [Configurer] before any other call.
type Config struct {
	// TTL is the time to live of every lock: the store must forget a lock
	// that has not been renewed for TTL.
	TTL time.Duration
	// Label names this Locker for humans (default host:pid). It is not used
	// for ownership checks.
	Label string
	// Logger receives the driver's diagnostics; never nil.
	Logger *slog.Logger
	// Backoff is the Locker's polling policy (locker.WithBackoff), for an
	// [Acquirer] that polls: call its Poll or Delay, which add the jitter.
	// The engine's own wait loop uses the same. Never nil.
	Backoff Backoff
	// Closing ends when the Locker starts to close, before Close waits for
	// the calls in progress, and never otherwise. The engine always sets it.
	// A call whose ctx's Done returns Closing.Done() ends only when the
	// Locker closes: the engine makes such calls for callers whose own ctx
	// can never end. A driver that promises PromptCancel may stop all of
	// them in one action when Closing ends, instead of watching each
	// call's ctx. A driver may ignore it.
	Closing context.Context
}

// Info describes a driver to the engine.
type Info struct {
	// Name is the backend name used in errors, e.g. "redis".
	Name string
	// MaxKeyBytes is the longest store key (namespace prefix included, in
	// bytes) the driver accepts; 0 means no limit. Longer keys are rejected
	// by the engine with locker.ErrInvalidKey naming this limit.
	MaxKeyBytes int
	// PerLockTTL reports that the driver honours [Request.TTL] and
	// [Lease.TTL] when they differ from [Config.TTL]: a TTL per lock, which
	// may change from one renewal to the next (the engine lengthens it so
	// that a lock with locker.MinHold outlives a crash of its holder). When
	// false, the engine always sends Config.TTL and refuses the options
	// that need another.
	PerLockTTL bool
	// PromptCancel promises that every call of the driver returns soon after
	// its ctx ends, whatever the store does, the first call included.
	// Renew and RenewBatch are exempt: they may end at their ctx's deadline
	// alone. The engine then makes the other store calls of its callers
	// (Lock, TryLock, Unlock, Inspect, List, ...) in the caller's goroutine.
	// When false, and for Extend's renewal, it makes each in another
	// goroutine, and returns without waiting for it when the caller's ctx
	// ends. It
	// makes them in the caller's goroutine all the same for a caller whose
	// ctx can never end (its Done returns nil). The conformance case
	// PromptCancel checks the promise.
	PromptCancel bool
}

// Request describes one acquisition attempt.
type Request struct {
	// Key is the store key: the user's key with the namespace prefix.
	Key string
	// Owner is an unguessable random token (from crypto/rand) unique to this
	// acquisition. The driver stores it and checks it on renew and release.
	Owner string
	// Label is the human-readable owner label, for stores that record it.
	Label string
	// Data is stored with the hold by a [DataSetter] (nil: none). The
	// engine checks its size; other drivers never get any.
	Data []byte
	// TTL is how long the store must keep the lock without a renewal.
	TTL time.Duration
	// Lost may be called by the driver, at any time and any number of times,
	// once it learns asynchronously that this acquisition's lock is gone
	// (a watch saw the key deleted, the session expired). It never blocks.
	Lost func(cause error)
}

// Grant is a successful acquisition.
type Grant struct {
	// Token is the fencing token: strictly greater than every token the
	// store handed out earlier for the same key.
	Token uint64
	// Validity is how long after the request was sent the store guarantees
	// the lock, at least (0 means Request.TTL). The engine's local deadline
	// is computed from it.
	Validity time.Duration
	// Since is the moment (read with time.Now, so it carries the monotonic
	// clock) the request that established Validity was sent. Zero means the
	// moment the engine called TryAcquire or Acquire; queue-based drivers
	// whose Acquire waits must set it (for example to the send time of the
	// last lease keep-alive).
	Since time.Time
	// State is the driver's own per-lock state (a node path, a version),
	// handed back in [Lease.State].
	State any
	// Queued reports that the acquisition waited behind another holder
	// (set by an Acquirer; the engine knows it for its own wait loop), for
	// observers telling hand-offs from first tries.
	Queued bool
}

// Lease identifies a held lock in Renew and Release.
type Lease struct {
	Key   string
	Owner string
	Token uint64
	TTL   time.Duration
	State any
}

// Driver is the interface every backend implements.
type Driver interface {
	// Info describes the driver. It is called once, by the engine's
	// constructor.
	Info() Info

	// TryAcquire makes one attempt to take req.Key for req.Owner. It returns
	// an error matching ErrHeld (preferably built with Held) when another
	// owner holds the key, and any other error when the store failed.
	TryAcquire(ctx context.Context, req Request) (Grant, error)

	// Release gives the lock up if it is still owned by l.Owner; it must
	// never release another owner's lock. It returns an error matching
	// ErrNotHeld when the lock was no longer ours.
	Release(ctx context.Context, l Lease) error

	// Close releases the driver's own resources (subscriptions, goroutines).
	// It does not close the user's client. The engine calls it once, after
	// every other call has returned.
	Close() error
}

// Renewer is implemented by drivers that renew one lock per call. A driver
// implements Renewer or [BatchRenewer]; the engine uses RenewBatch when
// both are there.
type Renewer interface {
	// Renew extends the lock's life to l.TTL from now, if it is still
	// owned by l.Owner. It returns the new validity (0 means l.TTL), an
	// error matching ErrNotHeld when the store says the lock is no longer
	// ours, or another error when the outcome is unknown.
	Renew(ctx context.Context, l Lease) (time.Duration, error)
}

// Configurer is implemented by drivers that need the resolved options (for
// example to size a lease) or want to reject values the store cannot honour.
// The engine calls Configure once, before any other method but Info; an error
// makes the constructor fail with it.
type Configurer interface {
	Configure(ctx context.Context, cfg Config) error
}

// Notifier is implemented by drivers that can tell waiters that a key may have
// become free, so waiting needs no polling. The engine subscribes only after
// a TryAcquire found the key held, then tries once more before it waits, so
// no release is missed and the uncontended path never subscribes. It also
// subscribes for locker.Watch, for as long as the watch runs, also when the
// driver is an [Acquirer].
type Notifier interface {
	// Subscribe starts watching key. The returned channel receives a value
	// (it is never closed) whenever the key may have become free. cancel
	// stops the subscription; it must be called exactly once and must not
	// block for long.
	Subscribe(ctx context.Context, key string) (ch <-chan struct{}, cancel func(), err error)
}

// Acquirer is implemented by queue-based drivers whose waiters line up in
// the store and are granted the key in order. When present, the engine's
// Lock calls Acquire instead of its own wait loop.
//
// Acquire blocks until the key is granted, ctx ends, or the store fails. On
// any return without a grant it must remove every trace of the waiter from
// the store (using a fresh, bounded context), so that a cancelled or failed
// wait never blocks the waiters behind it.
type Acquirer interface {
	Acquire(ctx context.Context, req Request) (Grant, error)
}

// ContextCloser is implemented by drivers whose Close does store work, such
// as revoking a lease. The engine then calls CloseContext instead of
// [Driver.Close], once, after every other call has returned, with a ctx
// that ends when the Locker's Close must return (one release timeout after
// it was called): the driver must return promptly once ctx ends, leaving
// what it could not do to the store's own expiry.
type ContextCloser interface {
	CloseContext(ctx context.Context) error
}

// Keeper is implemented by drivers that can give a lock up while leaving
// its key claimed in the store for a while longer, with no process and no
// renewal: what locker.MinHold needs (a scheduled job's lock stays taken for
// the rest of its tick after the job ends early, or its holder crashes).
type Keeper interface {
	// Keep ends l like [Driver.Release], except that the key stays claimed
	// for remaining more on the store's clock (it may round up, never
	// down), then is free. Nobody renews it. It must never touch another
	// owner's lock, and returns an error matching ErrNotHeld when the lock
	// was no longer l.Owner's. It may be called more than once for the same
	// lease (a retry after an unknown outcome).
	Keep(ctx context.Context, l Lease, remaining time.Duration) error
}

// Status is what a store says of one key, for operators and for "who
// leads" (locker.Inspect). Times are the store's clock where it has one.
type Status struct {
	// Held reports whether somebody holds the key (a lock kept for its
	// MinHold counts).
	Held bool
	// Label is the holder's owner label (locker.WithOwnerLabel).
	Label string
	// Token is the holder's fencing token.
	Token uint64
	// Acquired is when the holder took the key; zero when the store does
	// not record it (etcd).
	Acquired time.Time
	// Expires is when the store frees the key unless it is renewed; zero
	// when unknown (ZooKeeper keeps it while the holder's session lives).
	Expires time.Time
	// Waiters is how many contenders are queued for the key in the store; 0
	// for stores where waiters poll (MySQL).
	Waiters int
	// Limit is the number of permits of a semaphore's key; 0 for other keys.
	Limit int
	// Holders lists every holder of a key held by shared holds (semaphore
	// permits, read or write holds); nil for other keys. Held, Label,
	// Token, Acquired and Expires then describe the newest holder.
	Holders []Holder
	// Data is the holder's [Request.Data], or what [DataSetter.SetData]
	// set last (nil: none).
	Data []byte
}

// Inspector is implemented by drivers that can tell who holds a key
// (locker.Inspect). It only reads.
type Inspector interface {
	Inspect(ctx context.Context, key string) (Status, error)
}

// BatchRenewer is implemented by drivers that can renew many locks in one
// round trip (a pipeline, one UPDATE). The engine then renews every lock due
// in a tick with one call, and a single lock with a batch of one.
type BatchRenewer interface {
	// RenewBatch renews every lease and returns one result per lease, in
	// order, with the same meaning as [Renewer.Renew]'s results. errs[i] applies to
	// ls[i]. A non-nil err means the whole batch failed with an unknown
	// outcome.
	RenewBatch(ctx context.Context, ls []Lease) (validity []time.Duration, errs []error, err error)
}

// Breaker is implemented by drivers that can free a key whoever holds it
// (locker.ForceUnlock), for operators: a holder that hung, a lock kept for
// its MinHold that must end now.
type Breaker interface {
	// Break frees key (a store key, with the prefix) in the store, whoever
	// holds it, a lock kept by [Keeper] included, and wakes or hands the
	// key over to the waiters as a Release would. Queued waiters stay
	// queued. It returns an error matching ErrNotHeld when nobody held the
	// key. The holder is not told: it learns at its next renewal, or at
	// once where the store tells it, that its lock is lost.
	Break(ctx context.Context, key string) error
}

// DataSetter is implemented by drivers that store [Request.Data] with an
// exclusive hold, report it in [Status.Data], and can change it while the
// hold lasts (locker.WithData, locker.SetData). Shared holds carry no data.
type DataSetter interface {
	// SetData replaces the data stored with l's hold, if l.Owner still
	// holds l.Key; nil data removes it. The hold, its token and its
	// expiry stay as they are. It returns an error matching ErrNotHeld
	// when the lock is no longer l.Owner's.
	SetData(ctx context.Context, l Lease, data []byte) error
}
