package conformance

import (
	"testing"
	"time"

	"github.com/golocker/locker"
)

// Harness tells the suite how to reach a backend. Required fields are
// NewLocker and TTL; every other field is an optional fault hook, and a nil
// hook makes the cases that need it skip with a message saying which hook is
// missing. New hooks are only ever added as optional fields, so a harness
// written today keeps compiling and passing.
//
// Every hook receives the testing.TB of the case (or benchmark) that calls
// it, on that case's goroutine: it may use t.Helper, t.Cleanup, t.Context and
// t.Fatal. A case's attempt that hung goes on in its goroutine after its
// test completed: the hooks it calls then, and the goroutines they started,
// may still use t, which drops their logs and failures, ends the caller at
// t.Fatal and t.Skip, and runs a t.Cleanup function at once.
//
// Cases run in parallel (except those that use Restart), each on its own keys,
// so every hook must be safe for concurrent use.
type Harness struct {
	// NewLocker returns a fresh Locker with its own client or connection,
	// standing for another replica. It must use the TTL below. The suite
	// closes every Locker it creates; the harness may register its own
	// cleanup with t.Cleanup. Returning nil fails the case.
	NewLocker func(t testing.TB) locker.Locker

	// TTL is the lock time to live the Lockers use. Short TTLs (1–3 s) keep
	// the suite fast: the longest cases wait a few TTLs.
	TTL time.Duration

	// Crash makes l vanish as a crashed process would: it stops talking to
	// the store, never releases and never renews (for example: close its
	// client without unlocking, or, where closing the client ends its
	// session cleanly as with ZooKeeper, cut its proxy for good). l is not
	// used by the suite afterwards except
	// through locks it handed out earlier and its Close.
	Crash func(t testing.TB, l locker.Locker)

	// Isolate cuts l off from the store while other Lockers still reach it
	// (for example through a TCP proxy), and returns a function that heals
	// the cut.
	Isolate func(t testing.TB, l locker.Locker) (heal func())

	// DeleteBehind deletes the lock state of key (the caller's key, before
	// any prefix) directly in the store, behind the holder's back.
	DeleteBehind func(t testing.TB, key string)

	// Restart stops the store and starts it again (data may be lost, as with
	// a Redis without persistence). It returns when the store accepts
	// connections again. The case that uses it runs alone, never alongside
	// the other cases of the same Run.
	Restart func(t testing.TB)

	// Failover replaces the store's primary by a replica (a graceful
	// Sentinel failover, an etcd leader change) and returns once the new
	// one serves. Locks the backend granted before or while it ran must
	// survive it. The case that uses it runs alone.
	Failover func(t testing.TB)

	// Nodes is how many store nodes Slow can slow down (Redlock's masters).
	// Cases that use Slow need at least three.
	Nodes int

	// Slow makes one store node, node (0 ≤ node < Nodes), slow for l alone:
	// from the call until the returned function is called, each request l
	// sends to that node and each reply l gets from it reach the other end
	// d late, in order on each connection, while the other nodes and the
	// other Lockers keep their pace. Bytes on their way when the function
	// is called keep their delay; later ones go at once. The harness ends
	// the delay when the test ends.
	Slow func(t testing.TB, l locker.Locker, node int, d time.Duration) (restore func())

	// Busy makes the caller of l busy: from the call until the returned
	// function is called, every connection of the client or pool the
	// caller gave l (the handle the caller shares with its own work) is
	// taken by the caller's own slow work, as a busy application's slow
	// queries or blocking commands take them: a request on that handle
	// waits for one to come back. The store itself answers at once, other
	// Lockers are untouched, and a Locker that owns its connections (it
	// was given an address, not a client) has nothing to fill. The
	// returned function ends the work, and returns once its connections
	// are back; the harness ends it when the test ends.
	Busy func(t testing.TB, l locker.Locker) (release func())

	// NewLockerWith, when set, returns what the backend's constructor
	// returns for the harness's configuration plus opts (applied last, so
	// they win): a Locker, or the constructor's error. The suite closes a
	// Locker it gets. Cases use it to check that bad options are refused.
	NewLockerWith func(t testing.TB, opts ...locker.Option) (locker.Locker, error)

	// MaxKeyBytes, when positive, is the documented key length limit, in
	// bytes of the caller's key (any prefix the harness's Lockers use
	// already subtracted): keys up to it must work, longer keys must fail
	// with ErrInvalidKey.
	MaxKeyBytes int

	// MultiAtomic reports that the backend takes the keys of a
	// TryLockMulti in one store operation (it implements
	// driver.MultiAcquirer and the case's keys fit in one), so that a
	// failed TryLockMulti never holds any key, even for a moment.
	MultiAtomic bool

	// lockMulti, when set, stands in for locker.LockMulti and
	// locker.TryLockMulti in the multi-key cases: the suite's own test
	// sets broken ones there.
	lockMulti lockMultiFunc
}
