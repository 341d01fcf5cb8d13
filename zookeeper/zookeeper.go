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
	// The default is [DefaultACL], chosen by what the connection carries.
	// On a connection with credentials (Digest, or the user's own
	// conn.AddAuth before New), every node is the creator's alone (the
	// "auth" scheme: every Locker of a Root must use the same credentials).
	// On a connection without, the world may do what locking needs and no
	// more: no ADMIN anywhere (nobody can re-ACL a node to block a key),
	// and lock nodes are READ-only (they are deleted through their key's
	// node). Anyone who reaches ZooKeeper can then delete a lock node, and
	// the Locker logs a warning saying so. The Locker finds out at the
	// first node it creates: it asks for the creator's ACL, and takes the
	// world's only when ZooKeeper refuses that with zk.ErrInvalidACL (the
	// connection has no credentials). The choice holds for the Locker's
	// life.
	ACL []zk.ACL

	// Digest, when set ("user:password"), is added to the connection
	// (conn.AddAuth("digest", …)) by New, and makes the default ACL the
	// creator's alone.
	Digest string
}

// DefaultACL returns the ACLs a Locker sets when Config.ACL is empty, on a
// connection that carries credentials (authenticated) or none: for the
// container nodes (Root, its ancestors and the key nodes) and for the lock
// nodes. See Config.ACL.
func DefaultACL(authenticated bool) (containers, locks []zk.ACL) {
	if authenticated {
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
// share conn between Lockers; expiry is then noticed at the next renewal,
// and a new session's granted timeout at its next grant or renewal.
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
	if c.Digest != "" {
		if !strings.Contains(c.Digest, ":") {
			return nil, &locker.Error{Op: "new", Backend: backendName, Err: locker.ErrInvalidOption, Cause: errors.New(`Config.Digest is not "user:password"`)}
		}
		if err := conn.AddAuth("digest", []byte(c.Digest)); err != nil {
			return nil, &locker.Error{Op: "new", Backend: backendName, Cause: fmt.Errorf("add digest auth: %w", err)}
		}
	}
	return locker.New(newDriver(conn, events, root, c.nodeACL()), opts...)
}

// nodeACL returns the ACLs of the nodes a Locker made with c creates.
func (c Config) nodeACL() *nodeACL {
	if len(c.ACL) > 0 {
		return &nodeACL{containers: c.ACL, locks: c.ACL}
	}
	// Without Digest, the connection may carry the caller's credentials,
	// or none: the first create tells.
	containers, locks := DefaultACL(true)
	return &nodeACL{containers: containers, locks: locks, probe: c.Digest == ""}
}

// Guard returns a ZooKeeper operation that succeeds only while lk is still
// held: a version check of the holder's node. Put it first in a
// zk.Conn.Multi with the writes that the lock protects; the multi then fails
// as a whole (with zk.ErrNoNode for the check) once the lock was released,
// lost or its session expired.
//
//	check, err := zookeeper.Guard(lk)
//	_, err = conn.Multi(check, &zk.SetDataRequest{Path: "/config", Data: data, Version: -1})
//
// Nested holds (inside Do) give the outer lock's check. It returns an error
// matching locker.ErrInvalidOption for a nil Lock or one not handed out by a
// Locker of this package.
func Guard(lk locker.Lock) (*zk.CheckVersionRequest, error) {
	if lk == nil {
		return nil, &locker.Error{Op: "guard", Backend: backendName, Err: locker.ErrInvalidOption, Cause: errors.New("nil Lock")}
	}
	st, _ := locker.DriverState(lk)
	h, ok := st.(*hold)
	if !ok {
		return nil, &locker.Error{Op: "guard", Backend: backendName, Key: lk.Key(), Err: locker.ErrInvalidOption, Cause: errors.New("the Lock was not handed out by a zookeeper Locker")}
	}
	return &zk.CheckVersionRequest{Path: h.path, Version: -1}, nil
}

// zeroConn reports whether conn was not made by zk.Connect: a zero zk.Conn
// has no request queue, and its every call would block forever. The check
// reads go-zookeeper's unexported request channel (TestNewRefusesZeroClients
// fails if that field ever goes away).
func zeroConn(conn *zk.Conn) bool {
	f := reflect.ValueOf(conn).Elem().FieldByName("sendChan")
	return f.IsValid() && f.Kind() == reflect.Chan && f.IsNil()
}
