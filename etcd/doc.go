// Package etcd is the etcd backend of locker: consensus-backed locks with FIFO
// waiters, on the user's own go.etcd.io/etcd/client/v3 client.
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
//	...
//	lk, err := etcd.New(cli, locker.WithTTL(10*time.Second))
//
// The reasons behind this design are in the repository's docs/design.md.
//
// # How it works
//
// Each Locker has one etcd lease, shared by all its locks and waiters, with
// the TTL of [locker.WithTTL]. A Lock puts a waiter key, attached to the
// lease, in a directory of its own for the lock's key ([Dir]). The waiter
// with the lowest create revision holds the lock, as in etcd's
// concurrency.Mutex. The uncontended path is one transaction that creates
// the waiter key and reads its predecessor. Unlock is one transaction that
// deletes it. A waiter watches only its predecessor.
//
// A lock whose TTL is not the Locker's ([locker.TTL], or a [locker.MinHold]
// longer than the TTL) is queued on the Locker's lease, then its key moves
// onto a lease of its own, of that TTL, before Lock returns. Its renewals
// keep its key on a lease that lasts the TTL asked for, and move it back
// onto the Locker's lease once that TTL is the Locker's again (a MinHold's
// shrinks). Each move is a transaction guarded by the key's create
// revision: the key keeps its place in the queue and its fencing token.
//
// The engine's renewal rounds keep the lease alive: one KeepAliveOnce per
// round, whatever the number of locks. While there are waiters, they keep
// it alive too. Where the Locker holds a key for a renewal round or longer,
// it watches its own keys in that key's directory, from the revision after
// their creation, until it holds nothing there: the watch reports a key
// deleted behind its holder's back. A lock that joins a directory after
// its watch passed a deletion of the lock's key name, and every lock of a
// directory whose watch ended (a compacted revision, a member without a
// leader), is read once at the next round, and the watch restarts from that
// read. A Locker whose lease is lost (expired during a partition, revoked)
// loses every lock at once, and takes a new lease for later locks. Close
// revokes the lease.
//
// # Guarantees
//
//   - Mutual exclusion backed by Raft: a lock survives the loss of a minority
//     of members, and leader changes.
//   - Fencing tokens are the create revisions of the holders' keys: strictly
//     increasing across every key of the cluster, and across restarts.
//   - Waiters are served in the order they arrived (FIFO by create revision).
//   - A waiter whose lease ends (expired, revoked) or whose key is deleted
//     returns at once with an error; a waiter that is cancelled or fails
//     deletes its key with a fresh, bounded context.
//   - Lock.Done closes before etcd can expire the lease: the validity is
//     counted from the moment the last keep-alive was sent. A holder whose key
//     is deleted behind its back sees Done close when its watch reports the
//     deletion, or at the next renewal round (within TTL/3) when no watch
//     covers the key yet.
//   - The shared lease never keeps a forgotten key alive: the keys of
//     releases and waits that failed with an unknown outcome, and of locks
//     that passed their deadline, are deleted before the lease is kept alive
//     again.
//   - [Guard] makes the caller's own transactions conditional on still
//     holding the lock: fencing enforced by etcd itself.
//   - Semaphores and read-write locks (locker.NewSemaphore,
//     locker.NewRWMutex): each permit or hold, granted or waiting, is a key
//     of the key's directory on the lease, queued by create revision. A
//     request holds once the keys ahead of it and its own fit: a writer
//     must be first, a reader needs no writer ahead, permits need their
//     weights to add up to at most the limit. Later arrivals never overtake
//     a waiter. The limit is the first key's, or the limit record's once
//     locker.SetLimit changed it: another limit gets an error naming both.
//     A grant's token is the revision of the write that made it (the key's
//     creation, or a rewrite of a waiter's key), so it is greater than
//     every token handed out before.
//   - locker.SetLimit puts a limit record ([LimitKey]) beside the key's
//     directory, and rewrites no holder's or waiter's key: every token
//     stays as granted. Every grant reads or compares the record, so none
//     is made under a limit it replaced. Holders keep their permits when
//     the limit drops, and grants wait until they fit. Waits with the old
//     limit fail at their next attempt, naming the new one: the waiters'
//     watch of the record wakes them.
//   - locker.TryLockMulti, and each attempt of a waiting
//     locker.LockMulti, take every key in one transaction or none: it puts
//     every waiter key when every key's directory is empty. The keys share
//     that transaction's revision as their tokens. More than 100 keys, or
//     more than the server's --max-txn-ops, are taken one by one.
//
// # Limits
//
//   - The TTL must be a whole number of seconds (etcd leases count seconds)
//     and at least the server's minimum lease TTL, 1.5 × its election
//     timeout rounded up (2 s with etcd's defaults); [New] asks the server and
//     rejects a TTL it cannot honour, naming [locker.WithTTL]. New therefore
//     needs the server: it fails, naming the endpoints and the connection's
//     error, when no connection is up within [DefaultDialTimeout] (Open:
//     dial_timeout), and when the grant does not succeed within 30 s
//     ([NewContext] takes a ctx instead).
//   - A waiting Lock rides out store errors (no leader, refused or reset
//     connections, timeouts) until its ctx ends; a closed client,
//     authentication and permission refusals, and an operator revoking the
//     waiter's lease or deleting its key end it at once. A waiter key a
//     failed wait could not delete is deleted in the background as soon as
//     etcd answers.
//   - A waiter that crashed while queued holds up the key until its lease
//     expires: one TTL after its last keep-alive.
//   - A lock with a TTL of its own costs a lease grant and a transaction
//     more to take, and one or two more calls per renewal. Its lease counts
//     whole seconds, rounded up. A holder that crashes between taking the
//     key and moving it leaves it for the Locker's TTL. A Locker whose lease
//     is lost loses its locks on leases of their own too; their keys stay
//     until those leases expire.
//   - The client of a URL-opened Locker logs through locker.WithLogger.
//   - Each acquisition writes a key and its release deletes it: etcd keeps
//     every revision until it compacts, so run it with auto-compaction
//     (--auto-compaction-mode=periodic --auto-compaction-retention=1h).
//   - A waiter for a permit or a shared hold keeps its place in line with
//     its key, and a watch of the deletions in the key's directory wakes
//     it: every release wakes every waiter of the key.
//   - A plain lock on a key held by permits or shared holds, or the other
//     way round, waits for them (TryLock: ErrNotAcquired); only a shared
//     request behind a plain lock gets the conflict error.
//   - A limit record rules only while the key has holders or waiters. The
//     last of them to leave deletes it; when they all went with their
//     leases (a crash, Close) or by ForceUnlock, the record stays, void,
//     until the next request for a permit or a shared hold deletes it.
//     Each waiter watches it: a wait costs two watches, the directory's and
//     the record's.
//   - Keys are at most [MaxKeyBytes] bytes, prefix included.
//   - etcd keys: the lock on store key k (prefix included) lives under
//     [Dir](k): k with '%' and NUL percent-encoded, then a NUL byte. Locks of
//     different keys never share a directory, even when one key is a prefix
//     of another. Each waiter key is the directory followed by the lease ID
//     in hex (a permit's or shared hold's, then a dot and a slot number
//     that the Locker's later requests reuse); its value is the
//     acquisition's owner token, a space and the owner label, then a NUL
//     byte and the lock's data (locker.WithData) when it has any. SetData puts the value again. A semaphore's limit
//     record is [LimitKey](k): k encoded as in Dir, then "%limit", which no
//     encoded key ends with. Lockers with [locker.WithPrefix] keep their
//     keys under that prefix, encoded as keys are ([KeyPrefix]: the same
//     unless it has a '%'), so `etcdctl get --prefix <KeyPrefix(prefix)>` lists them, and
//     a role with readwrite on that range is all a Locker needs beyond its
//     leases (TestRoleOnKeyPrefix).
//   - A key deleted by hand is lost for its holder only once the watch
//     reports it, or at the next renewal round: until then the holder and
//     the next waiter may both run.
//   - A request caught in flight by a leader change (a Lock's, an
//     Unlock's) may wait for etcd's request timeout, about 5 s plus two
//     election timeouts, before it fails; a key whose release waits so is
//     held meanwhile. Bound Unlock with its ctx.
//   - A Lock whose ctx ends while its queueing transaction is in flight
//     returns once etcd answered (at most 2 s later), so that its key is
//     deleted for sure. When etcd cannot answer, the key is deleted at once
//     if possible and again before the lease is next kept alive.
//
// # URLs
//
// [Open] opens a Locker, with a client it owns, for an etcd:// or etcds://
// URL; its doc lists the parameters.
package etcd
