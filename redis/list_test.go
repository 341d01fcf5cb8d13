package redis

import (
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// TestListBothNameForms: keys with a '}' live under the hashed name form
// (see KeysOf); List finds them too, glob characters in the prefix match
// only themselves, and keys outside the prefix stay out.
func TestListBothNameForms(t *testing.T) {
	srv := storeenv.Redis(t)
	l, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithPrefix("list-test/"))
	ctx := ctxFor(t, 30*time.Second)
	base := uniqueKey(t) + "*?["
	keys := []string{base + "plain", base + "brace}d", base + "}first"}
	for _, k := range append(keys, uniqueKey(t)+"-outside") {
		lk, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", k, err)
		}
		t.Cleanup(func() { _ = lk.Unlock(ctx) })
	}
	var got []string
	for ks, err := range locker.List(ctx, l, base) {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		got = append(got, ks.Key)
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	for _, k := range got {
		if !want[k] {
			t.Errorf("List(%q) yielded %q, which is not held under the prefix", base, k)
		}
		delete(want, k)
	}
	for k := range want {
		t.Errorf("List(%q) missed the held key %q", base, k)
	}
}
