// Package zookeeper is the ZooKeeper backend of locker: consensus-backed locks
// with FIFO waiters, on the user's own github.com/go-zookeeper/zk connection.
//
//	conn, events, err := zk.Connect([]string{"zk1:2181", "zk2:2181", "zk3:2181"}, 10*time.Second)
//	...
//	l, err := zookeeper.New(conn, events, locker.WithTTL(10*time.Second))
//
// # How it works
//
// The lock on a key is a queue of ephemeral sequential znodes under a parent
// of its own, Root/<escaped key>, a container node that ZooKeeper deletes by
// itself once it is empty. A Lock creates its node with Curator's
// "protection" (the name carries a random GUID: _c_<guid>-lock-<sequence>),
// in one multi-operation that also touches the parent, so the reply says how
// many nodes the queue holds: when ours is alone, the lock is held after one
// round trip. Otherwise the waiter lists the queue and watches only the two
// nodes just before its own (no thundering herd: a deletion wakes at most two
// waiters). When the farther one goes, the waiter lists the queue again,
// while the nearer one, by then usually the holder, still holds; when the
// nearer one goes after a listing showed it first in line, the waiter holds
// the lock as soon as the event arrives: no node can be ahead of it any more
// (otherwise it lists again). So a hand-off costs one message from the
// server, where go-zookeeper's zk.Lock lists the queue after the event.
// TryLock refuses at once when the queue is not empty (and deletes its node).
//
// A node lives as long as the ZooKeeper session of the connection, which the
// client keeps alive with pings. The engine renews every lock (every TTL/3,
// all locks of the Locker together) with one multi-operation of version
// checks, which goes through the leader: a success proves that the session
// was alive, and the node still there, after the renewal was sent.
//
// # Guarantees
//
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
//     behind its holder's back ends that lock at the next renewal round
//     (within TTL/3); so does a waiter's node deleted behind its back once
//     the waiter knows it is next, which gets the lock when the holder's
//     node goes. (Deleting another's nodes is outside what the lock
//     protects against: see Trust in Limits.)
//   - A lock whose holder gave up on it (its renewals failed until the local
//     deadline, or its Unlock's outcome was unknown) while the session lives
//     on is deleted in the background, so that it never blocks the key.
//   - [Guard] makes the caller's own ZooKeeper multi-operations conditional on
//     still holding the lock: fencing enforced by ZooKeeper itself.
//
// # Limits
//
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
//     session timeout (1.9 s at 1.5 s in the conformance run).
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
//   - Trust: by default the world gets no ADMIN on any node the Locker
//     creates (nobody can re-ACL a key's node to block it) and lock nodes
//     are READ-only, but without credentials anyone who reaches ZooKeeper
//     can delete a lock node through its key's node. With [Config].Digest
//     every node is its creator's alone ("auth" scheme): give every Locker
//     of a root the same credentials; the zk:// URL's acl parameter and
//     [Config].ACL set others. A key node tampered with (another ACL, or
//     made by another identity) makes Lock, TryLock or Unlock fail at once
//     with zk.ErrNoAuth, naming the node and the permission it lacks.
//   - Nodes other than the Locker's own must not be created under the root.
//     A key whose node has a child that is not a lock node makes TryLock
//     fail with [ErrForeignNode] naming that child when no lock is ahead
//     (Lock ignores it); a node named like a lock node that is not
//     ephemeral makes a Lock waiting behind it fail with ErrForeignNode
//     naming it (TryLock answers "held": telling it from a holder would
//     cost a read per refusal). Delete such nodes.
//   - Sequence numbers are ZooKeeper's signed 32-bit counters of the parent:
//     FIFO order breaks after 2^31 waiters on one key without the key's
//     parent ever becoming empty.
package zookeeper

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
)

const (
	// DefaultRoot is the znode under which locks live unless Config.Root
	// says otherwise.
	DefaultRoot = "/locker"

	// MaxKeyBytes is the longest store key (prefix included, in bytes) the
	// ZooKeeper backend accepts. Escaping can triple it in the znode name;
	// every renewal sends the names of all held locks, so a lock key is a
	// name, not data: hash longer natural keys before locking them.
	MaxKeyBytes = 4096

	backendName = "zookeeper"
)

// Config holds the ZooKeeper-specific settings of a Locker. The zero Config
// is the default: [New] is Config{}.New.
type Config struct {
	// Root is the absolute path of the znode under which every key gets a
	// node of its own (default [DefaultRoot]). Missing nodes on the way are
	// created as container nodes. It must not be "/" nor inside /zookeeper,
	// and its names must be valid znode names without '%'.
	Root string

	// ACL, when set, is set on every znode the Locker creates ([ParseACL]
	// reads it in zkCli.sh's syntax). The permissions a Locker's identity
	// needs, exactly (TestLeastPrivilege runs with these and no more):
	//
	//   - CREATE on Root (it creates the key nodes there), and on the
	//     parent of each node of Root's path it has to create;
	//   - READ, WRITE, CREATE and DELETE on the key nodes: a lock node is
	//     created with a write to its key's node in one multi-operation,
	//     waiters list the key's node, and lock nodes are deleted through it;
	//   - READ on the lock nodes of every identity that locks the same key:
	//     renewals are version checks (READ), and ZooKeeper sends no watch
	//     event of a node its watcher may not read, so a waiter behind such
	//     a node fails instead of waiting.
	//
	// ADMIN is never needed. A refusal names the node and the permission
	// it lacks.
	//
	// The default is [DefaultACL]: with Digest set, every node is the
	// creator's alone (the "auth" scheme: every Locker must use the same
	// credentials); without, the world may do what locking needs and no
	// more: no ADMIN anywhere (nobody can re-ACL a node to block a key),
	// and lock nodes are READ-only (they are deleted through their key's
	// node). Without credentials anyone who reaches ZooKeeper can still
	// delete a lock node: use Digest where that matters.
	ACL []zk.ACL

	// Digest, when set ("user:password"), is added to the connection
	// (conn.AddAuth("digest", …)) by New, and makes the default ACL the
	// creator's alone.
	Digest string
}

// DefaultACL returns the ACLs a Locker sets when Config.ACL is empty: for
// the container nodes (Root, its ancestors and the key nodes) and for the
// lock nodes. See Config.ACL.
func DefaultACL(withDigest bool) (containers, locks []zk.ACL) {
	if withDigest {
		return zk.AuthACL(zk.PermAll), zk.AuthACL(zk.PermAll)
	}
	return zk.WorldACL(zk.PermRead | zk.PermWrite | zk.PermCreate | zk.PermDelete), zk.WorldACL(zk.PermRead)
}

// New returns a Locker that keeps its locks in ZooKeeper through conn, with
// the default [Config]. It is short for Config{}.New(conn, events, opts...);
// see [Config.New].
func New(conn *zk.Conn, events <-chan zk.Event, opts ...locker.Option) (locker.Locker, error) {
	return Config{}.New(conn, events, opts...)
}

// New returns a Locker that keeps its locks in ZooKeeper through conn, under
// c.Root with c.ACL.
//
// events is the channel zk.Connect returned with conn: the Locker reads it
// from now on (it must not be read by anyone else) to learn at once that the
// session expired or the connection was closed. It may be nil, for example to
// share conn between Lockers; expiry is then noticed at the next renewal.
//
// The TTL of the shared options (locker.WithTTL) must not exceed the session
// timeout the server grants conn: see the package doc, Limits. New does not
// talk to the server. Closing the Locker does not close conn.
//
// It returns an error matching locker.ErrInvalidOption for a nil conn, an
// invalid c.Root or an invalid shared option.
func (c Config) New(conn *zk.Conn, events <-chan zk.Event, opts ...locker.Option) (locker.Locker, error) {
	if conn == nil {
		return nil, &locker.Error{Op: "new", Backend: backendName, Err: locker.ErrInvalidOption, Cause: errors.New("nil *zk.Conn")}
	}
	if zeroConn(conn) {
		return nil, &locker.Error{Op: "new", Backend: backendName, Err: locker.ErrInvalidOption, Cause: errors.New("zero zk.Conn: make it with zk.Connect")}
	}
	root := c.Root
	if root == "" {
		root = DefaultRoot
	}
	if err := validateRoot(root); err != nil {
		return nil, &locker.Error{Op: "new", Backend: backendName, Err: locker.ErrInvalidOption, Cause: err}
	}
	if err := validateACL(c.ACL); err != nil {
		return nil, &locker.Error{Op: "new", Backend: backendName, Err: locker.ErrInvalidOption, Cause: fmt.Errorf("Config.ACL: %w", err)}
	}
	containers, locks := DefaultACL(c.Digest != "")
	if len(c.ACL) > 0 {
		containers, locks = c.ACL, c.ACL
	}
	if c.Digest != "" {
		if !strings.Contains(c.Digest, ":") {
			return nil, &locker.Error{Op: "new", Backend: backendName, Err: locker.ErrInvalidOption, Cause: errors.New(`Config.Digest is not "user:password"`)}
		}
		if err := conn.AddAuth("digest", []byte(c.Digest)); err != nil {
			return nil, &locker.Error{Op: "new", Backend: backendName, Cause: fmt.Errorf("add digest auth: %w", err)}
		}
	}
	d := newDriver(conn, events, root, containers)
	d.lockACL = locks
	return locker.New(d, opts...)
}

// Guard returns a ZooKeeper operation that succeeds only while lk, a lock
// handed out by a Locker of this package, is still held: a version check of
// the holder's node. Put it first in a zk.Conn.Multi with the writes that
// the lock protects; the multi then fails as a whole (with zk.ErrNoNode for
// the check) once the lock was released, lost or its session expired.
//
//	check, ok := zookeeper.Guard(lk)
//	_, err := conn.Multi(check, &zk.SetDataRequest{Path: "/config", Data: data, Version: -1})
//
// It reports false for a Lock of another backend. Nested holds (inside Do)
// give the outer lock's check.
func Guard(lk locker.Lock) (*zk.CheckVersionRequest, bool) {
	if lk == nil {
		return nil, false
	}
	st, ok := locker.DriverState(lk)
	if !ok {
		return nil, false
	}
	h, ok := st.(*hold)
	if !ok {
		return nil, false
	}
	return &zk.CheckVersionRequest{Path: h.path, Version: -1}, true
}

// zeroConn reports whether conn was not made by zk.Connect: a zero zk.Conn
// has no request queue, and its every call would block forever. The check
// reads go-zookeeper's unexported request channel (TestNewRefusesZeroClients
// fails if that field ever goes away).
func zeroConn(conn *zk.Conn) bool {
	f := reflect.ValueOf(conn).Elem().FieldByName("sendChan")
	return f.IsValid() && f.Kind() == reflect.Chan && f.IsNil()
}
