package zookeeper_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
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
// node; the world may still do what locking needs.
func TestDefaultACLGivesTheWorldNoAdmin(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	root := "/locker-acl-" + rand.Text()[:10]
	conn, events := connectWith(t, srv, testTTL)
	l, err := zookeeper.Config{Root: root}.New(conn, events, locker.WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
	lk, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
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
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDigestMakesNodesTheCreators: with Config.Digest, an unauthenticated
// client can neither delete a holder's node, nor re-ACL or fill the key's
// node; Lockers with the same credentials contend as usual, and a Locker
// without them fails at once with an error naming the node.
func TestDigestMakesNodesTheCreators(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	root := "/locker-digest-" + rand.Text()[:10]
	cfg := zookeeper.Config{Root: root, Digest: "locker:s3cret"}
	a, b := configLocker(t, srv, cfg), configLocker(t, srv, cfg)
	ctx := t.Context()
	lk, err := a.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := connectWith(t, srv, testTTL)
	if err := admin.AddAuth("digest", []byte(cfg.Digest)); err != nil {
		t.Fatal(err)
	}
	parent, node := lockNode(t, admin, root, "k")
	intruder, _ := connectWith(t, srv, testTTL)
	if _, _, err := intruder.Children(parent); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Children(%s) without credentials = %v; want zk.ErrNoAuth", parent, err)
	}
	if err := intruder.Delete(node, -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Delete(%s) without credentials = %v; want zk.ErrNoAuth", node, err)
	}
	if _, err := intruder.SetACL(parent, zk.WorldACL(zk.PermRead), -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("SetACL(%s) without credentials = %v; want zk.ErrNoAuth", parent, err)
	}
	if _, err := intruder.Create(parent+"/junk", nil, 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Create under %s without credentials = %v; want zk.ErrNoAuth", parent, err)
	}
	if _, err := b.TryLock(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("TryLock by a Locker with the same credentials while held = %v; want ErrNotAcquired", err)
	}
	select {
	case <-lk.Done():
		t.Fatalf("the holder lost its lock: %v", lk.Err())
	default:
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock by a Locker with the same credentials after Unlock: %v", err)
	}
	defer lb.Unlock(ctx)

	// Without the credentials: refused at once, naming the node.
	plain := configLocker(t, srv, zookeeper.Config{Root: root})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = plain.Lock(wctx, "k")
	if !errors.Is(err, zk.ErrNoAuth) || wctx.Err() != nil || !strings.Contains(err.Error(), parent) {
		t.Errorf("Lock without the credentials = %v; want zk.ErrNoAuth naming %s, at once", err, parent)
	}
}
