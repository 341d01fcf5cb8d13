package redis_test

import (
	"context"
	"crypto/rand"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// aclUser creates an ACL user with password "pw", every command but the
// @dangerous ones (the README's recipe) and rules,
// dropped when the test ends, and returns a client of it.
func aclUser(t *testing.T, admin *goredis.Client, addr string, rules []string) (string, *goredis.Client) {
	t.Helper()
	user := "tenant_" + rand.Text()[:8]
	args := []any{"ACL", "SETUSER", user, "on", ">pw", "+@all", "-@dangerous"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := admin.Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %v: %v", rules, err)
	}
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	o := clientOptions(addr)
	o.Username, o.Password = user, "pw"
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return user, c
}

// allowed reports whether user may touch every name of the lock on store
// key s (keys with GET; the channel, and a Locker's hand-over channel
// under it, with PUBLISH and SUBSCRIBE), per ACL DRYRUN.
func allowed(t *testing.T, admin *goredis.Client, user, s string) bool {
	t.Helper()
	keys := redis.KeysOf(s)
	v := reflect.ValueOf(keys)
	var cmds [][]any
	for i := range v.NumField() {
		name := v.Field(i).String()
		if v.Type().Field(i).Name != "Channel" {
			cmds = append(cmds, []any{"ACL", "DRYRUN", user, "GET", name})
			continue
		}
		for _, ch := range []string{name, name + ":0123456789abcdef"} {
			cmds = append(cmds,
				[]any{"ACL", "DRYRUN", user, "PUBLISH", ch, "x"},
				[]any{"ACL", "DRYRUN", user, "SUBSCRIBE", ch})
		}
	}
	ok := true
	for _, cmd := range cmds {
		res, err := admin.Do(t.Context(), cmd...).Text()
		if err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
		ok = ok && res == "OK"
	}
	return ok
}

// TestACLRulesCoverEveryKeyOfAPrefix: a user given redis.ACLRules(P) locks
// every key under P, those containing '}' included (their names have
// another form, which "~locker:{P*" alone does not cover), and no key
// of another prefix, even one whose text contains P.
func TestACLRulesCoverEveryKeyOfAPrefix(t *testing.T) {
	srv := testenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const prefix = "t1/"

	// The two selectors alone: a key with '}' is refused.
	_, narrow := aclUser(t, admin, srv.Addr(), []string{"~locker:{" + prefix + "*", "&locker:{" + prefix + "*"})
	nl, err := redis.New(narrow, locker.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	if _, err := nl.TryLock(ctx, "we}ird"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("TryLock of a key with '}' under ~locker:{P* alone = %v; want NOPERM", err)
	} else {
		t.Logf("with ~locker:{%s* and &locker:{%s* only: %v", prefix, prefix, err)
	}

	rules := redis.ACLRules(prefix)
	t.Logf("ACLRules(%q) = %q", prefix, rules)
	user, c := aclUser(t, admin, srv.Addr(), rules)
	for _, s := range []string{prefix + "plain", prefix + "we}ird", prefix + "}", prefix + "{x}"} {
		if !allowed(t, admin, user, s) {
			t.Errorf("the names of %q are not all allowed by %q", s, rules)
		}
	}
	for _, s := range []string{"t2/plain", "t2/x}:" + prefix + "y", "t2/x:" + prefix + "y", "t12/plain", "t1", "x}t1/"} {
		if allowed(t, admin, user, s) {
			t.Errorf("the names of %q (another prefix) are allowed by %q", s, rules)
		}
	}
	// A glob character in a prefix is taken literally.
	globUser, _ := aclUser(t, admin, srv.Addr(), redis.ACLRules("a*/"))
	if allowed(t, admin, globUser, "ab/x") || !allowed(t, admin, globUser, "a*/x}") {
		t.Errorf("ACLRules(%q) = %q: the '*' must match itself only", "a*/", redis.ACLRules("a*/"))
	}

	// Two Lockers of the user contend on both kinds of key.
	a, err := redis.New(c, locker.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redis.New(c, locker.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, key := range []string{"plain", "we}ird"} {
		lk, err := a.Lock(ctx, key)
		if err != nil {
			t.Fatalf("Lock(%q) by the tenant: %v", key, err)
		}
		got := make(chan error, 1)
		go func() {
			wl, err := b.Lock(ctx, key)
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
			t.Errorf("a waiting Lock(%q) by the tenant: %v", key, err)
		}
	}

	// A Locker from Open names a tombstone in its cancellable attempts
	// (locker:{key}:cut:<owner>): the rules cover it too.
	u := &url.URL{Scheme: "redis", User: url.UserPassword(user, "pw"), Host: srv.Addr()}
	ol, err := redis.Open(ctx, u, locker.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer ol.Close()
	for _, key := range []string{"plain", "we}ird"} {
		lk, err := ol.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("TryLock(%q) by the tenant's Locker from Open: %v", key, err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
