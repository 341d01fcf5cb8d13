package zookeeper_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// lockNode returns the path of the only lock node of key under root.
func lockNode(t *testing.T, c *zk.Conn, root, key string) (parent, node string) {
	t.Helper()
	parent = zookeeper.QueuePath(root, key)
	children, _, err := c.Children(parent)
	if err != nil || len(children) != 1 {
		t.Fatalf("children of %s: %v, %v; want one lock node", parent, children, err)
	}
	return parent, parent + "/" + children[0]
}

// configLocker returns a Locker made with cfg and the test TTL, on a
// connection of its own to srv; both end with the test.
func configLocker(t *testing.T, srv *testenv.ZooKeeperServer, cfg zookeeper.Config) locker.Locker {
	t.Helper()
	conn, events := connectWith(t, srv, testTTL)
	l, err := cfg.New(conn, events, locker.WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestDefaultACLGivesTheWorldNoAdmin: without credentials, nobody can
// re-ACL the Locker's nodes (a way to block a key for good) or write a lock
// node; the world may still do what locking needs, and the Locker warns
// that anyone can break its locks.
func TestDefaultACLGivesTheWorldNoAdmin(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	root := "/locker-acl-" + rand.Text()[:10]
	conn, events := connectWith(t, srv, testTTL)
	var logs testenv.LogBuffer
	l, err := zookeeper.Config{Root: root}.New(conn, events, locker.WithTTL(testTTL),
		locker.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
	lk, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "anyone who reaches ZooKeeper can break the locks") {
		t.Errorf("a Locker on a connection without credentials must warn once that anyone can break its locks; logged:\n%s", out)
	}
	other, _ := connectWith(t, srv, testTTL)
	parent, node := lockNode(t, other, root, "k")
	for _, p := range []string{root, parent, node} {
		if _, err := other.SetACL(p, zk.WorldACL(zk.PermRead), -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("SetACL(%s) by another client = %v; want zk.ErrNoAuth (the world has no ADMIN)", p, err)
		}
	}
	if _, err := other.Set(node, []byte("x"), -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Set(%s) by another client = %v; want zk.ErrNoAuth (lock nodes are READ-only)", node, err)
	}
	// A second Locker without credentials, whose first node is a lock node
	// under an existing key's node, finds out too.
	var logs2 testenv.LogBuffer
	conn2, events2 := connectWith(t, srv, testTTL)
	l2, err := zookeeper.Config{Root: root}.New(conn2, events2, locker.WithTTL(testTTL),
		locker.WithLogger(slog.New(slog.NewTextHandler(&logs2, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if _, err := l2.TryLock(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("TryLock of a held key by a Locker without credentials = %v; want ErrNotAcquired", err)
	}
	if out := logs2.String(); !strings.Contains(out, "anyone who reaches ZooKeeper can break the locks") {
		t.Errorf("a Locker on a connection without credentials must warn that anyone can break its locks; logged:\n%s", out)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDigestMakesNodesTheCreators: with Config.Digest, an unauthenticated
// client can neither delete a holder's node, nor re-ACL or fill the key's
// node; Lockers with the same credentials contend as usual, and a Locker
// without them fails at once with an error naming the node. A round in
// which the holder lost its lock only because no renewal came back in time
// (rerun.StarvedLoss) says nothing, and runs again, up to three rounds; any
// other loss (its node deleted) fails at once.
func TestDigestMakesNodesTheCreators(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	root := "/locker-digest-" + rand.Text()[:10]
	cfg := zookeeper.Config{Root: root, Digest: "locker:s3cret"}
	a, b := configLocker(t, srv, cfg), configLocker(t, srv, cfg)
	ctx := t.Context()
	admin, _ := connectWith(t, srv, testTTL)
	if err := admin.AddAuth("digest", []byte(cfg.Digest)); err != nil {
		t.Fatal(err)
	}
	intruder, _ := connectWith(t, srv, testTTL)
	var key, parent string
	rerun.Starved(t, 3, func(i int) error {
		key = fmt.Sprintf("k%d", i)
		lk, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var node string
		parent, node = lockNode(t, admin, root, key)
		var f findings
		if _, _, err := intruder.Children(parent); !errors.Is(err, zk.ErrNoAuth) {
			f.errorf("Children(%s) without credentials = %v; want zk.ErrNoAuth", parent, err)
		}
		if err := intruder.Delete(node, -1); !errors.Is(err, zk.ErrNoAuth) {
			f.errorf("Delete(%s) without credentials = %v; want zk.ErrNoAuth", node, err)
		}
		if _, err := intruder.SetACL(parent, zk.WorldACL(zk.PermRead), -1); !errors.Is(err, zk.ErrNoAuth) {
			f.errorf("SetACL(%s) without credentials = %v; want zk.ErrNoAuth", parent, err)
		}
		if _, err := intruder.Create(parent+"/junk", nil, 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
			f.errorf("Create under %s without credentials = %v; want zk.ErrNoAuth", parent, err)
		}
		if _, err := b.TryLock(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
			f.errorf("TryLock by a Locker with the same credentials while held = %v; want ErrNotAcquired", err)
		}
		return f.settle(ctx, t, lk)
	})
	lb, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock by a Locker with the same credentials after Unlock: %v", err)
	}
	defer lb.Unlock(ctx)

	// Without the credentials: refused at once, naming the node.
	plain := configLocker(t, srv, zookeeper.Config{Root: root})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = plain.Lock(wctx, key)
	if !errors.Is(err, zk.ErrNoAuth) || wctx.Err() != nil || !strings.Contains(err.Error(), parent) {
		t.Errorf("Lock without the credentials = %v; want zk.ErrNoAuth naming %s, at once", err, parent)
	}
}

// TestAuthenticatedConnGetsCreatorACL: on a connection the user
// authenticated (conn.AddAuth, then New without Config.Digest), every node
// of a held lock is its creator's: an anonymous client can neither delete
// nor re-ACL the root's ancestor, the root, the key's node, the holder's
// node or a waiter's node, and the holder keeps its lock. Where the ACL
// asks for world-read, the anonymous client can still read them. A round
// in which the holder lost its lock only because no renewal came back in
// time (rerun.StarvedLoss) says nothing, and runs again, up to three
// rounds; any other loss (its node deleted) fails at once.
func TestAuthenticatedConnGetsCreatorACL(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	const creds = "app:s3cret"
	for _, c := range []struct {
		name      string
		acl       string // Config.ACL in ParseACL's syntax; "" for the default
		worldRead bool
	}{
		{name: "default"},
		{name: "creator,world-read", acl: zookeeper.ACLCreator + "," + zookeeper.ACLWorldRead, worldRead: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			top := "/locker-authacl-" + rand.Text()[:10]
			cfg := zookeeper.Config{Root: top + "/locks"}
			if c.acl != "" {
				acl, err := zookeeper.ParseACL(c.acl)
				if err != nil {
					t.Fatal(err)
				}
				cfg.ACL = acl
			}
			authed := func() locker.Locker {
				conn, events := connectWith(t, srv, testTTL)
				if err := conn.AddAuth("digest", []byte(creds)); err != nil {
					t.Fatal(err)
				}
				l, err := cfg.New(conn, events, locker.WithTTL(testTTL))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			holder, waiter := authed(), authed()
			admin, _ := connectWith(t, srv, testTTL)
			if err := admin.AddAuth("digest", []byte(creds)); err != nil {
				t.Fatal(err)
			}
			anon, _ := connectWith(t, srv, testTTL)
			rerun.Starved(t, 3, func(i int) error {
				return authenticatedACLRound(t, holder, waiter, admin, anon, cfg.Root, top, fmt.Sprintf("k%d", i), c.worldRead)
			})
		})
	}
}

// authenticatedACLRound is one round of TestAuthenticatedConnGetsCreatorACL
// on key. It returns the holder's loss to renewals that never came back,
// and fails t on any other fault.
func authenticatedACLRound(t *testing.T, holder, waiter locker.Locker, admin, anon *zk.Conn, root, top, key string, worldRead bool) error {
	ctx := testCtx(t, 30*time.Second)
	lk, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter's node joins the queue.
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		lw, err := waiter.Lock(wctx, key)
		if err == nil {
			err = lw.Unlock(ctx)
		}
		waited <- err
	}()
	defer func() {
		cancel()
		<-waited
	}()
	parent := zookeeper.QueuePath(root, key)
	var queue []string
	for deadline := time.Now().Add(20 * time.Second); len(queue) < 2; time.Sleep(10 * time.Millisecond) {
		if starved := starvedLoss(lk); starved != nil {
			return starved
		}
		if queue, _, err = admin.Children(parent); err != nil || time.Now().After(deadline) {
			t.Fatalf("the queue %s: %v, %v; want the holder's and the waiter's nodes", parent, queue, err)
		}
	}
	nodes := []string{top, root, parent}
	for _, q := range queue {
		nodes = append(nodes, parent+"/"+q)
	}

	var f findings
	for _, p := range nodes {
		// The top node's parent is "/", which is the world's: it
		// cannot go only because it is not empty.
		if err := anon.Delete(p, -1); p != top && !errors.Is(err, zk.ErrNoAuth) || err == nil {
			f.errorf("Delete(%s) by an anonymous client = %v; want zk.ErrNoAuth (the node's parent is its creator's)", p, err)
		}
		if _, err := anon.SetACL(p, zk.WorldACL(zk.PermAll), -1); !errors.Is(err, zk.ErrNoAuth) {
			f.errorf("SetACL(%s) by an anonymous client = %v; want zk.ErrNoAuth", p, err)
		}
		_, _, err := anon.Get(p)
		if worldRead && err != nil {
			f.errorf("Get(%s) by an anonymous client with world-read = %v; want the node", p, err)
		}
		if !worldRead && !errors.Is(err, zk.ErrNoAuth) {
			f.errorf("Get(%s) by an anonymous client = %v; want zk.ErrNoAuth", p, err)
		}
	}
	if _, _, err := anon.Children(parent); worldRead && err != nil {
		f.errorf("Children(%s) by an anonymous client with world-read = %v; want the queue", parent, err)
	}
	if err := f.settle(ctx, t, lk); err != nil {
		return err
	}
	if err := <-waited; err != nil {
		t.Errorf("the waiter, after the holder's Unlock: %v", err)
	}
	waited <- nil // for the deferred receive
	return nil
}
