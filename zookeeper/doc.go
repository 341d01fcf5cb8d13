// Package zookeeper is the ZooKeeper backend of locker: consensus-backed locks
// with FIFO waiters, on the user's own github.com/go-zookeeper/zk connection.
//
//	conn, events, err := zk.Connect([]string{"zk1:2181", "zk2:2181", "zk3:2181"}, 10*time.Second)
//	...
//	l, err := zookeeper.New(conn, events, locker.WithTTL(10*time.Second))
//
// The reasons behind this design are in the repository's docs/design.md.
//
// # How it works
//
// The lock on a key is a queue of ephemeral sequential znodes under a parent
// of its own, Root/<escaped key>. The parent is a container node, which
// ZooKeeper deletes once it is empty. Node names carry a random GUID
// (Curator's protection: _c_<guid>-lock-<sequence>). A Lock alone in the
// queue holds after one round trip. Otherwise it watches only the node just
// before its own, and the holder's when that is the node before, so a
// deletion wakes at most two waiters. A waiter sends the server no more
// requests than go-zookeeper's zk.Lock. TryLock refuses at once when the
// queue is not empty, and deletes its node.
//
// locker.TryLockMulti and locker.LockMulti list the keys' queues, with the
// stat of each key's node, in parallel, and take every key in one
// multi-operation. It adds a lock node to each queue behind a check of the
// key node's data version. Every lock node is created with a write of its
// key's node, so the check fails once a lock node joined the queue since
// the listing, and the multi-operation then takes nothing. When this
// Locker's own multi-key take was the last to hold every key, and released
// them within the TTL, the next take skips the listings: the checks of the
// versions it saw, and of each key node's czxid in the reply, tell whether
// the keys are still free. Keys another Locker took in between are listed
// for the next TTL. A waiting LockMulti holds nothing between attempts: it
// watches the last lock node of each held key's queue, and tries again
// when one goes. A MultiLock's keys are released in one multi-operation.
//
// A node lives as long as the ZooKeeper session of the connection, which the
// client keeps alive with pings. The engine renews every lock every TTL/3,
// all locks of the Locker in one multi-operation of version checks, through
// the leader.
//
// # Guarantees
//
//   - A TryLockMulti that finds a key held writes nothing; one that races
//     a lock on one of its keys takes none of them. The keys of a
//     MultiLock share one token, the zxid of its multi-operation.
//   - Mutual exclusion backed by ZooKeeper's atomic broadcast: a lock
//     survives the loss of a minority of servers, and of the leader.
//   - Fencing tokens are the czxid of the holder's node (the zxid of the
//     transaction that created it): strictly increasing across every key of
//     the ensemble, across server restarts and when a parent node is
//     deleted and created again. Sequence numbers are never used as tokens.
//   - Waiters are served in the order they arrived (FIFO by sequence). A
//     waiter whose session expires returns at once with an error; one
//     whose node was deleted, when it next lists the queue.
//   - A cancelled or failed Lock or TryLock deletes its own node with a
//     fresh, bounded context; when the reply to the create was lost, the
//     node is found by its GUID. A node whose deletion fails (the server is
//     unreachable) is deleted in the background as soon as the session
//     answers again, for as long as the session lives.
//   - Lock.Done closes before ZooKeeper could expire the session: the
//     validity of a lock is counted from the moment the last successful
//     renewal was sent; a new lock's, from the moment its create was sent
//     (a write, which the leader accepts only from a live session) or,
//     when it waited longer than a quarter of the validity, from a sync
//     with the leader sent with its last listing of the queue. A session
//     that expires (reported on the events channel given to [New]) or a
//     connection that is closed ends every lock taken in it at once; later
//     locks use the new session the client establishes. A node deleted
//     behind its holder's back ends that lock when ZooKeeper's event
//     arrives (the holder watches its node once it has held it for 10 ms;
//     an earlier deletion ends it then), at the latest at the next
//     renewal round (within TTL/3); so does a waiter's node deleted behind
//     its back once the waiter knows it is next, which gets the lock when
//     the holder's node goes. (Deleting another's nodes is outside what the lock
//     protects against: see Trust in Limits.)
//   - A lock whose holder gave up on it (its renewals failed until the local
//     deadline, or its Unlock's outcome was unknown) while the session lives
//     on is deleted in the background, so that it never blocks the key.
//   - [Guard] makes the caller's own ZooKeeper multi-operations conditional on
//     still holding the lock: fencing enforced by ZooKeeper itself.
//   - Semaphores and read-write locks (locker.NewSemaphore,
//     locker.NewRWMutex), as in Curator's recipes: each permit or hold,
//     granted or waiting, is an ephemeral sequential node of the key's
//     queue whose name carries its mode, weight and limit. A request holds
//     once the nodes ahead of it and its own fit: a writer must be first,
//     a reader needs no writer ahead, permits need their weights to add up
//     to at most the limit. Later arrivals never overtake a waiter. The
//     key's limit is the first node's, or its limit record's: another limit
//     gets an error naming both. A crashed holder's permit goes with its
//     session. A grant's token is the zxid of the write that made it (the
//     node's creation, or for a waiter a write to the key's node with a
//     check of its own), so it is greater than every token handed out
//     before.
//   - locker.SetLimit writes a limit record, a persistent sequential child
//     of the key's node named _limit_<limit>_<sequence>, in one
//     multi-operation that checks the key's first node is still there. A
//     grant reads the record in the same listing as the queue. The record
//     rules while a node older than it is left: a record whose nodes all
//     went (the last holder's session ended, say) rules no later holder.
//     Its creation wakes the key's waiters; those with another limit fail
//     naming it. SetLimit refuses a plain lock or a read-write lock with
//     locker.ErrInvalidOption, and writes nothing on a free key.
//
// # Limits
//
//   - A lock node's data is the owner label, then a NUL byte and the
//     lock's data (locker.WithData) when it has any. SetData rewrites the
//     node, which needs WRITE on it: on a connection without credentials
//     the default ACL makes lock nodes READ-only, and SetData answers an
//     error matching errors.ErrUnsupported.
//   - The TTL (locker.WithTTL) is the session timeout: connect with the same
//     duration, zk.Connect(servers, ttl). A lock is counted valid for the TTL
//     after each successful renewal, so the session timeout the server
//     grants must be at least the TTL. ZooKeeper grants what is asked within
//     [minSessionTimeout, maxSessionTimeout], by default 2 to 20 ticks (4 s
//     to 40 s with the default tickTime of 2 s), and lowers a longer request
//     to the maximum without telling go-zookeeper's users. The Locker reads
//     the timeout the server granted: New refuses a connection whose session
//     was granted less than the TTL (it names both), and when a later
//     session (after a reconnect) is granted less, its locks count on the
//     granted timeout and a warning is logged. A session granted more than
//     the TTL (a server whose minimum is above it) works, but a crashed
//     holder's lock is freed only when its session expires, after the
//     granted timeout.
//   - A waiting Lock rides out connection errors until its ctx ends; a
//     closed connection and authentication or ACL refusals return at once.
//     Waiter nodes a failed wait could not delete are retried every TTL/10
//     until the session ends or the Locker closes. A waiter that crashed
//     while queued holds up the key until its session expires: the granted
//     session timeout.
//   - A waiter for a permit or a shared hold keeps its place in line with
//     its node, and a watch of the key's queue wakes it: every arrival and
//     every release wakes every waiter of the key.
//   - A plain lock on a key held by permits or shared holds, or the other
//     way round, waits for them (TryLock: ErrNotAcquired); only a shared
//     request behind a plain lock gets the conflict error.
//   - Inspect reports a holder's czxid as its token: for a hold granted
//     after waiting, that is below the token it was granted.
//   - A limit record outlives its holders until it is deleted: by the
//     Locker that wrote it once no older node is left, else by the next
//     Locker that lists the key. Until then the key's node stays (ZooKeeper
//     deletes only an empty container node). When the writer closes, or
//     its session ends, before that, the record waits for the next Locker
//     that lists the key.
//   - A waiting LockMulti takes no place in its keys' queues: while a key
//     has waiters, they go first. After one TTL the engine takes the keys
//     one by one instead (see locker.LockMulti). A key whose queue starts
//     with a shared hold gives LockMulti and TryLockMulti the conflict
//     error. Keys whose node names take more than 256 KiB are taken one by
//     one.
//   - A key node that is deleted (ZooKeeper deletes empty ones), made
//     again and brought back to the data version a LockMulti saw, by
//     others' locks, between its listing (or its own release, for keys it
//     recalls) and its write, shows only in the reply. The take then holds
//     its other keys for that round trip, gives them back, and answers
//     ErrNotAcquired.
//   - ZooKeeper 3.5.3 or later (container nodes, multi with checks).
//   - Keys are at most [MaxKeyBytes] bytes, prefix included. Any key maps to
//     exactly one znode name: '%', '/', control characters and the runes
//     ZooKeeper refuses in names (among them everything beyond U+FFFF, such
//     as emoji) are percent-encoded byte by byte, and the names "." and ".."
//     become %2E and %2E%2E; so a key takes up to three times its length on
//     the wire.
//   - The events channel returned by zk.Connect is consumed by the Locker;
//     a connection serves one Locker with events. More Lockers may share a
//     connection when given a nil channel: they notice an expired session at
//     their next renewal round instead of at once.
//   - go-zookeeper calls cannot be cancelled: when a ctx ends during a call,
//     the Locker returns at once and the call finishes in the background
//     (at the latest when the connection gives up on the request); Close
//     waits a bounded time for such calls.
//   - Every identity that locks a key needs READ on the others' lock nodes
//     (see [Config].ACL): ZooKeeper sends no watch event of a node its
//     watcher may not read, so a waiter behind such a node fails.
//   - Trust: on a connection that carries credentials ([Config].Digest,
//     or the caller's own conn.AddAuth before [New]), every node the
//     Locker creates is its creator's alone by default ("auth" scheme):
//     give every Locker of a root the same credentials. On a connection
//     without credentials the world gets no ADMIN on any node (nobody can
//     re-ACL a key's node to block it) and lock nodes are READ-only, but
//     anyone who reaches ZooKeeper can delete a lock node through its
//     key's node: the Locker logs a warning saying so. The zk:// URL's acl
//     parameter and [Config].ACL set other ACLs. A key node tampered with
//     (another ACL, or made by another identity) makes Lock, TryLock or
//     Unlock fail at once with zk.ErrNoAuth, naming the node and the
//     permission it lacks.
//   - Nodes other than the Locker's own must not be created under the root.
//     A key whose node has a child that is neither a lock node nor a limit
//     record makes TryLock
//     fail with [ErrForeignNode] naming that child when no lock is ahead
//     (Lock ignores it); a node named like a lock node that is not
//     ephemeral makes a Lock waiting behind it fail with ErrForeignNode
//     naming it (TryLock answers "held": telling it from a holder would
//     cost a read per refusal). Delete such nodes.
//   - Sequence numbers are ZooKeeper's signed 32-bit counters of the parent:
//     FIFO order breaks after 2^31 waiters on one key without the key's
//     parent ever becoming empty.
//   - locker.List reads the names of all the root's children for each page
//     (ZooKeeper has no paged read of children), then each page's keys.
//
// # URLs
//
// [Open] opens a Locker, with a connection it owns, for a zk:// URL; its doc
// lists the parameters.
package zookeeper
