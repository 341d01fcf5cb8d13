package redis

import (
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// TestListBothNameForms: keys with a '}' live under the hashed name form
// (see KeysOf); List finds them too, glob characters in the prefix match
// only themselves, and keys outside the prefix stay out. Keys held by
// semaphore permits and read holds are listed in both forms too.
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
	shared := []string{base + "sem", base + "sem}d", base + "rw", base + "}rw"}
	for i, k := range shared {
		var lk locker.Lock
		var err error
		if i < 2 {
			var s *locker.Semaphore
			if s, err = locker.NewSemaphore(l, k, 2); err == nil {
				lk, err = s.TryAcquire(ctx)
			}
		} else {
			var m *locker.RWMutex
			if m, err = locker.NewRWMutex(l, k); err == nil {
				lk, err = m.TryRLock(ctx)
			}
		}
		if err != nil {
			t.Fatalf("a shared hold on %q: %v", k, err)
		}
		t.Cleanup(func() { _ = lk.Unlock(ctx) })
	}
	keys = append(keys, shared...)
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
