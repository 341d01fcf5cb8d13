package redis

import (
	_ "embed"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/internal/storeenv"
)

// v1MultiReleaseLua is multi_release.lua of the version before a release
// kept " watched" for the next wait it records, as a Locker of that
// version runs it in a rolling upgrade.
//
//go:embed testdata/v1_multi_release.lua
var v1MultiReleaseLua string

// TestMultiWatchedLayout checks that releases of this version and of the
// version before it hand a key's LockMulti records on to each other: each
// wakes the record the other left, records its own next wait behind it,
// and leaves " watched" and a renewed expiry with it (the hash held
// nothing else); the last release, which
// records nothing, leaves no hash.
func TestMultiWatchedLayout(t *testing.T) {
	t.Parallel()
	c := newClient(t, storeenv.Redis(t).Addr())
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
	lock, w := name(kindLock, key), name(kindWaiters, key)
	keys := []string{lock, name(kindQueue, key), w}
	t.Cleanup(func() { c.Del(t.Context(), keys...) })
	if err := c.HSet(ctx, w, " watch L0 w0", "1", " watched", "1").Err(); err != nil {
		t.Fatal(err)
	}
	c.PExpire(ctx, w, 5*time.Second) // each release renews it to 2 × 30 s
	scripts := map[string]*goredis.Script{
		"this": goredis.NewScript(includeWatch(multiReleaseLua)),
		"old":  goredis.NewScript(v1MultiReleaseLua),
	}
	for i, v := range []string{"this", "old", "this", "old"} {
		owner, prev, next := "o"+string(rune('0'+i)), " watch L"+string(rune('0'+i))+" w"+string(rune('0'+i)), " watch L"+string(rune('1'+i))+" w"+string(rune('1'+i))
		if i == 3 {
			next = ""
		}
		c.Set(ctx, lock, owner+" 1 l", time.Minute)
		got, err := scripts[v].Run(ctx, c, keys, owner, "ch", next, "30000", "0").Int64Slice()
		want := int64(4)
		if next == "" {
			want = 1
		}
		if err != nil || len(got) != 1 || got[0] != want {
			t.Fatalf("release %d (%s version): %v, %v; want [%d] (woke %q, recorded %q)", i+1, v, got, err, want, prev, next)
		}
		fields := c.HKeys(ctx, w).Val()
		if next == "" {
			if len(fields) != 0 {
				t.Errorf("release %d (%s version) woke the last record and recorded nothing, but left %q", i+1, v, fields)
			}
			continue
		}
		if !c.HExists(ctx, w, next).Val() || c.HExists(ctx, w, prev).Val() || !c.HExists(ctx, w, " watched").Val() || len(fields) != 2 {
			t.Errorf("release %d (%s version) left fields %q; want %q and \" watched\"", i+1, v, fields, next)
		}
		if ms := c.PTTL(ctx, w).Val(); ms <= 30*time.Second {
			t.Errorf("release %d (%s version) left the waiters hash of one record without its expiry renewed (PTTL %v, want about 60s)", i+1, v, ms)
		}
	}
}
