// Package conformance is the test suite every locker backend must pass, in
// the manner of testing/fstest.TestFS and golang.org/x/net/nettest.TestConn:
// a backend's own test builds a [Harness] and calls [Run]; its benchmarks
// call [RunBenchmarks].
//
//	func TestConformance(t *testing.T) {
//		store := memory.NewStore()
//		conformance.Run(t, conformance.Harness{
//			TTL: time.Second,
//			NewLocker: func(t testing.TB) locker.Locker {
//				l, err := memory.New(store, locker.WithTTL(time.Second))
//				if err != nil {
//					t.Error(err)
//					return nil
//				}
//				return l
//			},
//		})
//	}
//
// The package imports only the standard library and the packages of
// locker's own module, so that third-party backends can use it without
// pulling in anyone's test servers.
//
// # Cases
//
// Every case runs as a subtest of Run, on its own keys (derived from the
// subtest's name plus a random suffix), under its own deadline sized from
// Harness.TTL, and states the contract it checks in its failure messages.
// A case that fails while the test process stalls, or with a lock lost at
// its local deadline for want of a timely answer to its renewals, runs
// again, up to three attempts (see Run): a machine too busy to renew locks
// in time loses them, as the contract allows. A
// case whose call does not return well after its deadline fails as hung.
//
//   - TryLock: a free key is granted, refused to another Locker with
//     ErrNotAcquired, and free again for it after Unlock; Key and Token.
//   - MutualExclusion: many Lockers and goroutines Lock one key hundreds of
//     times; a non-atomic counter and an occupancy counter prove that no two
//     holders ever overlapped, and tokens increase from holder to holder.
//   - LockWaits: Lock waits for a release; the ctx given to Lock or TryLock
//     bounds only the wait, cancelling it later does not release the lock.
//   - Cancellation: Lock calls whose ctx ends fail with ErrNotAcquired and
//     ctx.Err(), and leave nothing behind: once the holder unlocks, the key
//     is free within TTL/2 and stays free.
//   - Ownership: a second Unlock, or the Unlock of a stale handle, fails with
//     ErrNotHeld and never releases the current holder.
//   - OwnershipAfterCrash (Crash): the same after the holder crashed and
//     another Locker took the key; the crashed holder's Done is closed.
//   - Expiry (Crash): a crashed holder's key becomes free after its TTL.
//   - Renewal: a holder keeps its key for several TTLs.
//   - LossDeleteBehind (DeleteBehind): when the lock vanishes from the store,
//     Done closes, Err matches ErrLost, Unlock fails with ErrNotHeld, and
//     Do cancels its function's ctx with cause ErrLost.
//   - LossIsolate (Isolate): a holder cut off from the store has its Done
//     closed before anyone else can get the key.
//   - DoneAtDeadline (Isolate): once its Deadline passed, the cut-off
//     holder's Done is closed and Err matches ErrLost the moment they are
//     asked, not when the Locker's timer gets to run; and the ctx of Do's
//     function is cancelled with ErrLost when another Locker gets the key.
//   - Fencing: tokens strictly increase over a hundred successive holders.
//   - FencingAfterCrash (Crash), FencingAfterRestart (Restart): and across a
//     crash and takeover, and across a store restart.
//   - Scale: one Locker holds a thousand keys past several TTLs. A lock
//     lost as the contract allows (Done closed, or the store finding it
//     gone past its Deadline) sends the case round again, on new keys; it
//     fails when locks are lost in all three rounds.
//   - Reentrancy: inside Do's ctx, Lock, TryLock and Do on the same key
//     return nested holds whose release does not release; outside it the
//     same Locker waits like any other contender.
//   - Keys: the empty key fails with ErrInvalidKey everywhere; odd keys
//     (slashes, spaces, unicode, control characters, 4 KiB) either work as
//     distinct, exclusive keys or fail with ErrInvalidKey; nothing panics.
//   - Close: ends waits with ErrClosed, refuses further calls (a TryLock
//     racing Close succeeds or fails with ErrClosed, never with a bare
//     context error), closes every held lock's Done and releases the keys;
//     a second Close returns nil.
//   - Do: TryDo does not run its function on a held key; Do returns its
//     function's error and releases the key.
//   - StaleDoContext: a ctx kept past Do's return (or derived from it)
//     confers nothing while another Locker holds the key.
//   - CloseWhileIsolated (Isolate): Close of a holder cut off from the store
//     closes its locks' Done before another Locker gets the key (both sides
//     timed on the monotonic clock), and returns.
//   - UnlockRacingRenewal: Lock→Unlock and Do cycles whose releases land on
//     renewal rounds never report a loss after a successful release.
//   - UnlockEndedContext: Unlock with a cancelled, expired or nil ctx still
//     releases, well within one TTL.
//   - NilContext: Lock, TryLock, Do and TryDo with a nil ctx fail with
//     ErrInvalidOption, never panic, and grant nothing.
//   - BadPrefix (NewLockerWith): a prefix that is not UTF-8, does not end
//     with a separator, or leaves no room for a key is refused by the
//     constructor, naming the problem.
//   - CancelWhileIsolated (Isolate): waits cancelled while their Locker is
//     cut off from the store leave nothing behind: once it answers again,
//     the key is free within TTL/2 of the holder's Unlock, and stays free.
//   - LockRidesOutRestart (Restart): a waiting Lock gets the key after a
//     store restart, within its ctx.
//   - WaiterCrash (Crash): a waiter that crashed while queued holds up the
//     key for at most its TTL after the holder's Unlock.
//   - UnlockWhileIsolated (Isolate): an Unlock whose store call failed still
//     releases the key once the store answers, within TTL/2 of the heal.
//   - MinHold: a key taken with MinHold(m) stays claimed until m after the
//     acquisition after TryDo returned early, and (Crash) after its holder
//     crashed with m longer than the TTL; then it is free.
//   - MaxHold: a holder running past MaxHold(d) has Do's ctx cancelled with
//     ErrMaxHold at d, never earlier, and another Locker gets the key within
//     a TTL.
//   - LockTTL (Crash): a lock taken with TTL(t) outlives its crashed holder
//     for t; Deadline reports when Done would close.
//   - Elect (Crash): of three Lockers campaigning with locker.Elect, another
//     leads after the leader crashed, only once the crashed leader's Done
//     closed, with a higher token.
//   - Inspect: a free key shows free, a held one its holder's token (and
//     label), then free again after Unlock; skipped for a Locker that is not
//     a locker.Inspector.
//   - ForceUnlock: of a free key fails with ErrNotHeld; of a held key frees
//     it for another Locker, closes the holder's Done with ErrLost, and
//     hands the key to a waiting Lock; skipped for a Locker that is not a
//     locker.ForceUnlocker.
//   - HandOff (Crash optional): an Unlock, Do or TryDo that releases a key a
//     Lock waits for returns nil, and TryLock on a key held or being passed
//     on returns the lock or an error matching ErrNotAcquired, nothing else
//     (with Crash: also while the crashed holder's key expires under a
//     waiting Lock).
//   - Failover (Failover): locks granted before and while the store fails
//     over stay their holders' (or their Done closes) before another Locker
//     gets their keys, with higher tokens.
//   - DoPanic: when the function of Do or TryDo panics and its caller
//     recovers, the panic goes on with its own value and the key is free
//     for another Locker within one release timeout.
//   - CheckOptions: locker.CheckLockOptions refuses exactly the LockOption
//     sets (MinHold, MaxHold, TTL, bad values) that TryLock refuses, without
//     taking a lock; skipped for a Locker that is not a
//     locker.OptionChecker.
//   - LateDelivery (Isolate): waits cancelled while their Locker is cut off,
//     whose requests reach the store only after the holder's Unlock (a cut
//     that holds bytes and delivers them on the heal, as TCP does), leave no
//     holder: the key is free within TTL/2 of the heal, and stays free.
//   - PromptCancel (Isolate): Lock, TryLock and Unlock calls whose ctx
//     ends while their Locker is cut off from a store that does not answer
//     return within max(1 s, TTL/2) of the ctx's end, the first calls of
//     a fresh Locker included; a Lock fails with ErrNotAcquired and
//     ctx.Err(); once the store answers, the key is free within that
//     bound of the holder's Unlock.
//   - MultiNoDeadlock: two Lockers take the same two keys with
//     locker.LockMulti, given in opposite orders, hundreds of times: no
//     call waits for ever, and no key is held by both at once.
//   - MultiAllOrNothing: TryLockMulti and LockMulti that fail on their
//     last key (held elsewhere) leave the keys they took free within
//     TTL/2.
//   - MultiCrash (Crash): the keys of a crashed LockMulti holder are all
//     free within one TTL.
//   - MultiLoss (DeleteBehind): when one key vanishes from the store, the
//     MultiLock's Done closes and Err matches ErrLost; DoMulti cancels its
//     function's ctx with ErrLost.
//   - MultiCancel: LockMulti calls whose ctx ends while they wait for a
//     held key fail with ErrNotAcquired and ctx.Err(), and leave nothing
//     behind: once the holder unlocks, every key is free within TTL/2 and
//     stays free.
//   - List: locker.List yields every key held under a prefix (more than
//     one page of them, from two Lockers) once, with its holder's token
//     and label, and no free key; keys taken and released between them
//     during the listing never make a key held throughout go missing;
//     keys held by semaphore permits and read holds are listed too, with
//     their holders and the newest one's token; a key whose lock was lost
//     (its Err set: renewals starved) is not held throughout, and is
//     taken again before the next listing; skipped for a Locker that is
//     not a locker.Lister.
//   - Watch (Crash optional): locker.Watch reports a free key, then its
//     holder, then nobody after the Unlock, within one TTL of each change,
//     never a lower token after a higher one; with Crash, it reports the
//     next holder's higher token within one TTL of its grant after the
//     holder crashed. Skipped for a Locker that is not a locker.Inspector.
//   - Extend: locker.Extend raises a held lock's MaxHold (it stays held
//     past the old one) and lowers it (it ends then with ErrMaxHold,
//     Deadline no later); a MinHold it sets keeps the key claimed after an
//     early Unlock; it refuses TTL, and fails with ErrNotHeld once the lock
//     ended. Skipped for a Lock that is not a locker.Extender.
//   - SemaphoreLimit: five Lockers race three goroutines each, some taking
//     two permits, on a semaphore of three; never more than three permits
//     are held at once.
//   - SemaphoreCrash (Crash): the permit of a crashed holder is back within
//     one TTL, after its Done closed; the other holder's permit stays held.
//   - RWExclusion: readers of several Lockers share the key; a writer is
//     refused while they hold, and refuses readers and writers while it
//     holds; racing readers and writers never overlap a writer.
//   - RWWriterFirst: a writer waiting while readers of four Lockers keep
//     the key always held gets it.
//   - SharedFencing: permits and read and write holds, some at once, each
//     get a token greater than every earlier one of their key.
//   - SharedCancellation: a writer whose wait ended leaves no place in line
//     that holds readers up; waits for a permit whose ctx ended leave
//     nothing that takes it later.
//   - SharedLossIsolate (Isolate): the holders of a permit and of a read
//     hold, cut off from the store, have their Done closed before another
//     Locker gets the permit or the key.
//   - SharedLateDelivery (Isolate): LateDelivery for waits for a permit and
//     for a read hold: every permit, and the write hold, is free within
//     TTL/2 of the heal, and stays free.
//   - SemaphoreSetLimit: after Semaphore.SetLimit raises the limit of a
//     semaphore whose permits are all held, the new permits are granted and
//     no more; a Semaphore with the old limit is refused with an error
//     naming both; after it lowers the limit below the permits in use, a
//     grant waits until the holders fit. A limit of 0, and a read-write
//     lock's key, are refused. Skipped for a Locker that is not a
//     locker.LimitSetter.
//   - ForceUnlockShared: ForceUnlock of a semaphore with 200 holders (more
//     than etcd takes in one transaction) closes every holder's Done with
//     ErrLost and frees all the permits at once; skipped for a Locker that
//     is not a locker.ForceUnlocker.
//   - MultiTryAtomic (MultiAtomic): a TryLockMulti of eight keys that
//     fails because its last key is held elsewhere never holds any of its
//     keys, not even for a moment: another Locker polling the first with
//     TryLock never finds it taken.
//   - Data: the data of locker.WithData, every byte value and MaxData of
//     them, is what another Locker's Inspect and List report; data over
//     MaxData is refused; a waiter handed the key shows its own data, a
//     free key none, nor the next holder without data (by TryLock or by
//     TryLockMulti). SetData changes and removes it while the lock stays
//     held with its token, past renewals, and fails with ErrNotHeld after
//     Unlock. Skipped for a backend that cannot store data; its SetData
//     part, for a Lock whose SetData is unsupported.
//   - LossAfterRenewal: a lock forced free by another Locker after it was
//     renewed (deleted behind its back with DeleteBehind, for a Locker
//     that cannot force an unlock) has its Done closed and Err matching
//     ErrLost; so have two permits of a semaphore forced free, the first
//     renewed before, the second taken after that renewal (the permits are
//     left out for a Locker with no shared holds). Skipped for a Locker
//     that can neither force an unlock nor have its key deleted.
//   - MultiUnlock: once a MultiLock of four keys is unlocked, a Lock
//     that waited on each of two keys gets it, and another Locker takes
//     each of the other two, within TTL/2.
//   - SetLimitWaiters: waits with a semaphore's old limit, queued behind
//     the holder of every permit, fail once Semaphore.SetLimit lowered it,
//     naming the new limit; when they have returned, Inspect counts no
//     waiter, and a wait with the new limit for every permit is granted
//     within TTL/2 of the holder's Unlock, however long a TTL the old
//     waits asked for. Skipped for a Locker that is not a
//     locker.LimitSetter.
//   - SetLimitForgotten: the only holder of a semaphore of 2 whose limit
//     SetLimit raised to 4 unlocks, or crashes; a Semaphore of 3 then gets
//     three permits, within one TTL of the crash, and not a fourth, and
//     Inspect shows the limit 3. Skipped for a Locker that is not a
//     locker.LimitSetter.
//   - SharedKeyFreed: the only permit of a semaphore is unlocked, or its
//     holder crashes (with Crash); another Locker then takes the key with
//     TryLockMulti, beside a fresh key, with a token above the permit's,
//     and then with TryLock: at once after the Unlock, and at the first
//     try once Inspect shows the key free after the crash (within one TTL
//     of it for a Locker that cannot inspect).
//   - FirstHolder: on each of 40 free keys, four Lockers released at once
//     try once each: for the one permit of a semaphore of 1, then on 40
//     more keys one TryLock, one TryAcquire and two TryRLock. The grants
//     held at once must fit the key's kind and limit: a grant that returned
//     after an earlier one was lost (its Done closed when asked then) does
//     not count with it. Every other key was held and released once before
//     its race. An attempt may fail with a store error: once the grants
//     are released, another Locker must then take the key within TTL/2.
//   - CloseWhileWaiting (Isolate): Close of a Locker cut off from the
//     store while its Lock waits (and, with shared holds, a permit's
//     Acquire and a write hold's Lock) returns within two TTLs plus
//     slack, and each wait returns within that time with ErrClosed. Once
//     the cut heals and the holders unlock, a third Locker gets what the
//     closed waits waited for within one TTL.
//   - CloseEndsBackgroundCalls (Isolate): a Lock of a held key, a TryLock
//     of a free key and an Unlock, all with context.Background(), wait on
//     a Locker cut off from the store; Close returns, and ends each call,
//     within two TTLs plus slack, Lock and TryLock with an error.
//   - SemaphorePool: six Lockers, one worker each, take a permit of a
//     semaphore of four, hold it a moment, give it back and ask again at
//     once, for three TTLs, each until a deadline of its own; with Crash,
//     one crashes holding its permit. Never more than four permits are
//     held at once, and every worker gets permits.
//   - PromptCancelCalls (Isolate): Inspect, List, Extend and SetData calls
//     whose ctx is cancelled (it has no nearer deadline) while their Locker
//     is cut off from a store that does not answer return within
//     max(1 s, TTL/2) of the cancel, the first calls of a fresh Locker
//     included.
//   - MaxHoldBesideHeld: a Locker holds a key taken with a TTL so long
//     that its first renewal comes after the case gives up; another key
//     it takes with that TTL and MaxHold(TTL) ends within two TTLs plus
//     slack of that MaxHold, with ErrMaxHold. Skipped for a Locker that
//     refuses a TTL per lock.
//   - UnlockPastDeadline (Isolate): a holder cut off until its Deadline
//     passed, then healed, unlocks without having asked Done or Err: the
//     Unlock fails with ErrNotHeld and ErrLost, Err matches ErrLost and
//     Done is closed, whatever the store still holds; so does an Extend
//     of a second such lock (a locker.Extender), which renews nothing;
//     then both keys free for another Locker.
//   - ExtendWhileRenewed: Extend, called every TTL/10 for two TTLs while
//     the Locker renews the lock, succeeds every time; it may fail with
//     ErrNotHeld only once Done is closed. A lock lost as the contract
//     allows sends the case round again, on a new key; it fails when
//     locks are lost in all three rounds. Skipped for a Lock that is not
//     a locker.Extender.
//   - RefusedStraggler (Slow, Nodes ≥ 3): while a key is held, a quorum's
//     worth of Lockers, each slow on a node of its own (by TTL/8, at most
//     125 ms, each way), are refused it by TryLock; their late requests
//     reach the nodes after the holder's Unlock, and the next Locker's
//     TryLock must get the key at once.
//   - RenewalBesideBusyCaller (Busy): a Locker takes a lock, a permit and a
//     read hold, then the caller's own slow work holds every connection
//     of the client or pool it gave the Locker for three TTLs; none of
//     them is lost (their Done stays open), the lock is still refused to
//     another Locker, and each unlocks once the work ends. For a Locker
//     with no shared holds, the lock alone.
//   - TryBesideBusyCaller (Busy): a TryLock of a key used before, a
//     TryLock of a fresh key, a TryLockMulti of two fresh keys and a
//     semaphore's TryAcquire start while the caller's own slow work holds
//     every connection of the client or pool it gave the Locker, for a
//     quarter of a TTL and 500 ms; once the work ends, each takes its keys
//     (a request that reached the store after its fence must not end as
//     "held"). What they took may be lost soon after: a grant's validity
//     counts from the request's sending.
//   - LateGrant (Busy): a TryLock, a Lock, a TryLockMulti of two keys
//     and a semaphore's TryAcquire of free keys start while the caller's
//     own slow work holds every connection of the client or pool it gave
//     the Locker, for a TTL; once the work ends, each returns a hold whose
//     Done is still open, or an error. A grant that came back past its validity must be
//     confirmed with the store (or refused), never handed over lost.
//
// The shared-hold cases (SemaphoreLimit to ForceUnlockShared,
// SetLimitWaiters, SetLimitForgotten, SharedKeyFreed, FirstHolder and
// SemaphorePool) skip, saying so, for a Locker with no shared holds
// (locker.NewSemaphore refuses it).
//
// Cases of options a backend refuses (an error matching ErrInvalidOption)
// skip and say so.
//
// # Timing
//
// Cases make no wall-clock assertions ("took less than 10 ms"): they poll
// until a deadline of a few TTLs plus a few seconds of slack, so a slow CI
// machine makes them slower, not flaky. Timing belongs in [RunBenchmarks].
// PromptCancel and PromptCancelCalls are the exceptions, as their contract
// is about time: their bound of max(1 s, TTL/2) is one a loaded machine
// still meets.
//
// # The suite's own test
//
// The suite is proven able to fail: its internal test runs the cases against
// deliberately broken Lockers (one that grants every request, one whose Done
// never closes, one that reuses tokens, one whose stale Unlock releases the
// current holder, …) and requires each to be caught.
package conformance
