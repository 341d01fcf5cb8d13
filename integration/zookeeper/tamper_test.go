package zookeeper_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// TestTamperedKeyNodeFailsNamingIt: a key whose node someone else made with
// another ACL, or where someone added a node of their own, fails at once with
// an error naming the node (and the permission missing), instead of waiting
// for good or answering "held" for ever.
func TestTamperedKeyNodeFailsNamingIt(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	root := "/locker-tamper-" + rand.Text()[:10]
	l, other := configLocker(t, srv, zookeeper.Config{Root: root}), configLocker(t, srv, zookeeper.Config{Root: root})
	admin, _ := connectWith(t, srv, testTTL)
	ctx := t.Context()
	// The root exists once a lock was taken.
	lk, err := l.TryLock(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// keyNode makes the node of key as an intruder would, with acl.
	keyNode := func(key string, acl []zk.ACL) string {
		t.Helper()
		p := zookeeper.QueuePath(root, key)
		if _, err := admin.Create(p, nil, 0, acl); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// fails checks that err is at once, matches want and names every piece
	// of says.
	fails := func(what string, err error, want error, says ...string) {
		t.Helper()
		if !errors.Is(err, want) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s = %v; want at once an error matching %v", what, err, want)
			return
		}
		for _, s := range says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s = %v; want it to name %s", what, err, s)
			}
		}
		t.Logf("%s: %v", what, err)
	}
	wait := func(key string) (locker.Lock, error) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return other.Lock(wctx, key)
	}

	t.Run("junk child", func(t *testing.T) {
		p := keyNode("junk", zk.WorldACL(zk.PermAll))
		if _, err := admin.Create(p+"/junk", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		_, err := l.TryLock(ctx, "junk")
		fails("TryLock behind a junk child", err, zookeeper.ErrForeignNode, p+"/junk")
		// Lock waits only behind lock nodes: it gets the key.
		lk, err := wait("junk")
		if err != nil {
			t.Fatalf("Lock with a junk child in the key's node: %v", err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("persistent node named like a lock", func(t *testing.T) {
		p := keyNode("fake", zk.WorldACL(zk.PermAll))
		fake := p + "/_c_00000000000000000000000000000000-lock-0000000000"
		if _, err := admin.Create(fake, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		_, err := wait("fake")
		fails("Lock behind a persistent node named like a lock", err, zookeeper.ErrForeignNode, fake)
	})
	for _, c := range []struct {
		name  string
		perms int32
		says  string
	}{
		{"read only", zk.PermRead, "CREATE"},
		{"no WRITE", zk.PermAll &^ zk.PermWrite, "WRITE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "acl-" + rand.Text()[:6]
			p := keyNode(key, zk.WorldACL(c.perms))
			_, err := l.TryLock(ctx, key)
			fails("TryLock", err, zk.ErrNoAuth, p, c.says)
			_, err = wait(key)
			fails("Lock", err, zk.ErrNoAuth, p, c.says)
		})
	}
	t.Run("no READ", func(t *testing.T) {
		key := "acl-" + rand.Text()[:6]
		p := keyNode(key, zk.WorldACL(zk.PermAll&^zk.PermRead))
		lk, err := l.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Unlock(ctx)
		_, err = wait(key)
		fails("Lock behind a holder", err, zk.ErrNoAuth, p, "READ")
	})
	t.Run("no DELETE", func(t *testing.T) {
		key := "acl-" + rand.Text()[:6]
		p := keyNode(key, zk.WorldACL(zk.PermAll&^zk.PermDelete))
		lk, err := l.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		fails("Unlock", lk.Unlock(ctx), zk.ErrNoAuth, p, "DELETE")
	})
}

// TestLeastPrivilege: a Locker works with exactly the permissions
// Config.ACL's doc lists: CREATE on the root (made by an administrator, who
// keeps ADMIN), CREATE, DELETE, READ and WRITE on the key nodes, READ on the
// lock nodes; no ADMIN anywhere. A round in which the holder lost its lock
// only because no renewal came back in time (rerun.StarvedLoss) says
// nothing, and runs again, up to three rounds; a loss to a renewal the
// store refused or answered (no READ for its version check) fails at once.
func TestLeastPrivilege(t *testing.T) {
	srv := testenv.ZooKeeper(t)
	root := "/locker-least-" + rand.Text()[:10]
	admin, _ := connectWith(t, srv, testTTL)
	if err := admin.AddAuth("digest", []byte("admin:adm1n")); err != nil {
		t.Fatal(err)
	}
	rootACL := append(zk.DigestACL(zk.PermAll, "admin", "adm1n"), zk.DigestACL(zk.PermCreate, "locker", "s3cret")...)
	if _, err := admin.Create(root, nil, 0, rootACL); err != nil {
		t.Fatal(err)
	}
	acl, err := zookeeper.ParseACL("digest:" + zk.DigestACL(0, "locker", "s3cret")[0].ID + ":cdrw")
	if err != nil {
		t.Fatal(err)
	}
	cfg := zookeeper.Config{Root: root, Digest: "locker:s3cret", ACL: acl}
	a, b := configLocker(t, srv, cfg), configLocker(t, srv, cfg)
	rerun.Starved(t, 3, func(i int) error {
		ctx := testCtx(t, 60*time.Second)
		key := fmt.Sprintf("k%d", i)
		lk, err := a.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			lb, err := b.Lock(ctx, key) // queued behind a: READ on a's node
			if err == nil {
				err = lb.Unlock(ctx)
			}
			got <- err
		}()
		time.Sleep(testTTL) // a few renewal rounds (version checks)
		var f findings
		if st, err := locker.Inspect(ctx, a, key); err != nil || !st.Held {
			f.errorf("Inspect = %+v, %v; want held", st, err)
		}
		if err := f.settle(ctx, t, lk); err != nil {
			<-got // the waiter takes the key the holder lost, and gives it back
			return err
		}
		if err := <-got; err != nil {
			t.Fatalf("the waiter: %v", err)
		}
		return nil
	})
}
