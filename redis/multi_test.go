package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestTryAcquireMulti checks multi_acquire.lua: every key or none, a
// token per key above the key's fence, a key with waiters counted as held
// unless unfair, and ErrNotAtomic without a round trip where the keys
// cannot go in one script.
func TestTryAcquireMulti(t *testing.T) {
	t.Parallel()
	c := newClient(t, storeenv.Redis(t).Addr())
	ctx := ctxFor(t, 30*time.Second)
	d := newDriver(c)
	base := uniqueKey(t)
	keys := []string{base + ".a", base + ".b", "}" + base + ".c"} // both name forms
	t.Cleanup(func() {
		for _, k := range keys {
			c.Del(context.Background(), scriptKeys(k)...)
		}
	})
	reqs := func(owner string) []driver.Request {
		rs := make([]driver.Request, len(keys))
		for i, k := range keys {
			rs[i] = driver.Request{Key: k, Owner: owner + string(rune('0'+i)), Label: "l", TTL: 10 * time.Second}
		}
		return rs
	}
	if err := c.Set(ctx, fenceKey(keys[1]), "9000000000000000", time.Minute).Err(); err != nil {
		t.Fatalf("SET fence: %v", err)
	}

	// b held: nothing taken.
	if err := c.Set(ctx, lockKey(keys[1]), "X 1 x", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.TryAcquireMulti(ctx, reqs("A")); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("with b held: got %v, want ErrHeld", err)
	}
	for _, k := range []string{keys[0], keys[2]} {
		if n := c.Exists(ctx, lockKey(k), fenceKey(k)).Val(); n != 0 {
			t.Errorf("with b held, %s was written (%d names)", k, n)
		}
	}

	// b free but awaited: held for a fair Locker, taken by an unfair one.
	c.Del(ctx, lockKey(keys[1]))
	c.ZAdd(ctx, name(kindQueue, keys[1]), goredis.Z{Score: 1, Member: "W"})
	if _, err := d.TryAcquireMulti(ctx, reqs("B")); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("with waiters on b: got %v, want ErrHeld", err)
	}
	unfair := newDriver(c)
	unfair.unfairArg = "1"
	gs, err := unfair.TryAcquireMulti(ctx, reqs("C"))
	if err != nil {
		t.Fatalf("unfair, with waiters on b: %v", err)
	}
	for i, g := range gs {
		v := c.Get(ctx, lockKey(keys[i])).Val()
		if !strings.HasPrefix(v, "C"+string(rune('0'+i))+" ") {
			t.Errorf("key %d holds %q; want owner C%d", i, v, i)
		}
		if i == 1 && g.Token <= 9000000000000000 {
			t.Errorf("b's token %d is not above its fence", g.Token)
		}
	}

	// A Ring: refused before any round trip.
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := newDriver(ring).TryAcquireMulti(ctx, reqs("D")); !errors.Is(err, driver.ErrNotAtomic) {
		t.Errorf("on a Ring: got %v, want ErrNotAtomic", err)
	}
}
