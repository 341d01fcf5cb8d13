package etcd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/internal/etcdserver"
)

// TestRoleOnKeyPrefix: with auth enabled, a user whose role may read and
// write etcd.KeyPrefix(P) locks, waits and unlocks with locker.WithPrefix(P),
// also when P has a '%' (encoded in the store as in every key); a role on P
// as written does not cover the keys of such a prefix.
func TestRoleOnKeyPrefix(t *testing.T) {
	srv := startEtcd(t, etcdserver.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	root := newClient(t, srv.Endpoints())
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const prefix = "team%1/"
	must(root.UserAdd(ctx, "root", "rootpw"))
	must(root.UserGrantRole(ctx, "root", "root"))
	for user, key := range map[string]string{"encoded": etcd.KeyPrefix(prefix), "literal": prefix} {
		must(root.RoleAdd(ctx, user))
		must(root.RoleGrantPermission(ctx, user, key, clientv3.GetPrefixRangeEnd(key), clientv3.PermissionType(clientv3.PermReadWrite)))
		must(root.UserAdd(ctx, user, "pw"))
		must(root.UserGrantRole(ctx, user, user))
	}
	must(root.AuthEnable(ctx))
	newTenant := func(user string) locker.Locker {
		cfg := clientConfig(srv.Endpoints())
		cfg.Username, cfg.Password = user, "pw"
		// With auth, New authenticates within the dial timeout: leave
		// room for a loaded machine.
		cfg.DialTimeout = 20 * time.Second
		cli, err := clientv3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		l, err := etcd.NewContext(ctx, cli, locker.WithPrefix(prefix), locker.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}

	literal := newTenant("literal")
	if _, err := literal.TryLock(ctx, "k"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("TryLock with a role on %q as written = %v; want permission denied (the store key is %q)", prefix, err, etcd.KeyPrefix(prefix))
	} else {
		t.Logf("role on %q as written: %v", prefix, err)
	}

	a, b := newTenant("encoded"), newTenant("encoded")
	lk, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatalf("Lock with a role on etcd.KeyPrefix(%q) = %q: %v", prefix, etcd.KeyPrefix(prefix), err)
	}
	got := make(chan error, 1)
	go func() {
		wl, err := b.Lock(ctx, "k")
		if err == nil {
			err = wl.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("a waiting Lock of the tenant: %v", err)
	}
}
