package driver

import (
	"context"
	"errors"
	"time"
)

// Mode is the kind of a shared hold.
type Mode uint8

// The kinds of shared hold.
const (
	// Permits takes Weight of a semaphore's Limit permits.
	Permits Mode = iota + 1
	// Read is a read hold of a read-write lock: shared with other reads.
	Read
	// Write is a write hold of a read-write lock: exclusive.
	Write
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Permits:
		return "permits"
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "invalid mode"
}

// Share describes a shared hold: what a [Sharer] grants besides the
// exclusive lock of [Driver.TryAcquire].
type Share struct {
	// Mode is the kind of hold.
	Mode Mode
	// Limit is the key's number of permits, for Permits; 0 otherwise.
	// The store records it with the key's first holder and keeps it while
	// the key has holders or waiters.
	Limit int
	// Weight is how many permits the hold takes (Permits), or 1.
	Weight int
	// Queue reports that the caller will try again until ctx ends: the
	// store may record the request as waiting, so that later arrivals do
	// not overtake it. TryLock-style calls leave it false.
	Queue bool
}

// ErrConflict is returned (wrapped) by [Sharer.TryAcquireShared] and by
// [Driver.TryAcquire] when the key is in use in a way the request cannot
// join: a semaphore with another limit, a read-write lock asked for permits,
// a plain lock asked for a shared hold, or the other way round. The message
// names both sides. The engine gives up at once and reports it as
// locker.ErrInvalidOption.
var ErrConflict = errors.New("driver: key in use as another kind of lock")

// Sharer is implemented by drivers whose store lets several holders share a
// key: semaphores with expiring permits and read-write locks. The engine
// refuses locker.NewSemaphore and locker.NewRWMutex on a driver without it.
//
// Each shared hold is one holder, with its own [Request.Owner] and its own
// lease: [Renewer.Renew], [BatchRenewer.RenewBatch], [Driver.Release] and
// [Keeper.Keep] act on it by key and owner token, as they do on a lock.
// A hold the store forgets (expired, released, broken) frees its permits,
// and the store wakes the key's waiters (a [Notifier] notifies them).
//
// The store grants a hold only while every holder fits: the weights of the
// Permits holders add up to at most Limit; Read holders share the key with
// each other and nobody else; a Write holder is alone. Tokens come from the
// same sequence as the key's lock tokens: every grant, whatever its mode,
// gets a token strictly greater than every token handed out earlier for
// the key.
//
// A store that queues records a request with Queue set when it cannot be
// granted, and grants later arrivals only behind it: a waiting writer
// blocks later readers, a waiting heavy request later light ones. Such a
// record expires with the request's TTL unless the next attempt renews it,
// and the refusal is a [Residue] (errors.As finds it, errors.Is still
// matches [ErrHeld]) whose Cleanup removes the record. The engine keeps the
// Residue of a wait that ends without a grant. A refusal reports, through
// [Held], a Remaining no longer than a third of the request's TTL while
// the request is recorded, so that the waiter comes back before its
// record expires.
type Sharer interface {
	// TryAcquireShared makes one attempt to take a shared hold on req.Key
	// for req.Owner. It returns an error matching ErrHeld when the hold
	// does not fit now, one matching ErrConflict when it never can (see
	// ErrConflict), and any other error when the store failed.
	TryAcquireShared(ctx context.Context, req Request, s Share) (Grant, error)
}

// Holder is one holder of a key held by shared holds, in [Status.Holders].
type Holder struct {
	// Mode is the kind of hold.
	Mode Mode
	// Weight is how many permits it takes (Permits), or 1.
	Weight int
	// Label is the holder's owner label.
	Label string
	// Token is the hold's fencing token.
	Token uint64
	// Acquired and Expires are as in [Status]; zero when unknown.
	Acquired, Expires time.Time
}

// Limiter is implemented by Sharers whose store can change a semaphore's
// limit. The engine refuses locker.SetLimit on a driver without it.
type Limiter interface {
	// SetLimit sets the limit of the semaphore on key to limit, which is
	// positive. Holders keep their permits: when they hold more than the
	// new limit, grants wait until enough of them end. The store wakes the
	// key's waiters. A key with neither holders nor waiters has no limit in
	// the store, and SetLimit leaves it so: the next holder's limit rules.
	// It returns an error matching ErrConflict when the key is held as a
	// plain lock or a read-write lock.
	SetLimit(ctx context.Context, key string, limit int) error
}
