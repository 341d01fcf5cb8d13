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

// TestReleaseWatchersCheck: a release that frees a key whose waiters hash
// records queued waiters but no LockMulti lists none of the hash's fields
// (no HGETALL: with many waiters that list is long, and an unfair release
// frees the key at every hand-off). A LockMulti recorded with the key is
// still woken, one per release, and the last one woken leaves no mark.
func TestReleaseWatchersCheck(t *testing.T) {
	t.Parallel()
	r := newScriptRunner(t, map[string]string{"B": "LB", "C": "LC"}, true)
	ctx, c, key := r.ctx, r.c, r.key
	if r.acquire("A", "0") <= 0 {
		t.Fatal("A could not take the free key")
	}
	r.acquire("B", "1")
	r.acquire("C", "1")
	r.fresh()

	m := startMonitor(t, storeenv.Redis(t).Addr())
	r.release("A", "0")
	if r.acquire("X", "0") <= 0 {
		t.Fatal("X could not take the free key")
	}
	r.release("X", "0")
	r.holder() // a command after the scripts: their lines end
	for _, line := range m.scriptLines(ctx, t, key, 3) {
		if l := strings.ToLower(line); strings.Contains(l, `"hgetall"`) || strings.Contains(l, `"hkeys"`) {
			t.Errorf("a release with queued waiters and no LockMulti recorded listed the waiters hash: %s", line)
		}
	}

	// Two LockMulti attempts find the key held and record their Lockers.
	if r.acquire("Y", "0") <= 0 {
		t.Fatal("Y could not take the free key")
	}
	watchers := []*redisDriver{newDriver(c), newDriver(c)}
	for i, d := range watchers {
		reqs := []driver.Request{{Key: key, Owner: "M" + string(rune('0'+i)), Label: "l", TTL: 10 * time.Second}}
		call, err := d.newMultiCall(reqs, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.runMulti(ctx, reqs, call); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("LockMulti attempt on a held key: got %v, want ErrHeld", err)
		}
	}
	fields := func() (watches int, watched bool) {
		t.Helper()
		fs, err := c.HKeys(ctx, name(kindWaiters, key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if strings.HasPrefix(f, " watch ") {
				watches++
			}
			watched = watched || f == " watched"
		}
		return watches, watched
	}
	for _, want := range []int{1, 0} {
		r.release("Y", "0")
		if w, marked := fields(); w != want || marked != (want > 0) {
			t.Fatalf("after a release: %d LockMulti records, marked %v; want %d, marked %v", w, marked, want, want > 0)
		}
		if want > 0 && r.acquire("Y", "0") <= 0 {
			t.Fatal("Y could not take the free key")
		}
	}
}

// scriptLines returns the lines of the commands that the first n script
// calls naming key ran (marked "lua]"), once a line of another command
// followed them.
func (m *monitor) scriptLines(ctx context.Context, t *testing.T, key string, n int) []string {
	t.Helper()
	var lines []string
	calls, in := 0, false
	for {
		var line string
		select {
		case line = <-m.lines:
		case <-ctx.Done():
			t.Fatalf("MONITOR showed %d of %d script calls", calls, n)
		}
		if strings.Contains(line, " lua] ") {
			if in {
				lines = append(lines, line)
			}
			continue
		}
		if in && calls == n {
			return lines
		}
		in = strings.Contains(strings.ToLower(line), `"eval`) && strings.Contains(line, key)
		if in {
			calls++
		}
	}
}

// watchRecords counts the records of LockMulti waits of the Locker lid in
// the waiters hash of store key (fields " watch <lid> <wid>").
func watchRecords(ctx context.Context, t *testing.T, c goredis.Cmdable, key, lid string) int {
	t.Helper()
	fs, err := c.HKeys(ctx, name(kindWaiters, key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fs {
		if strings.HasPrefix(f, " watch "+lid+" ") {
			n++
		}
	}
	return n
}

// TestMultiRecordPerWait: two LockMulti waits of one Locker that find the
// same key held each record themselves with it. When one of them takes
// the key without a release consuming its record (the key expired), its
// successful attempt removes its own record only: the other's stays, so
// that the release of the key wakes the other, not only its refresh.
func TestMultiRecordPerWait(t *testing.T) {
	t.Parallel()
	c := newClient(t, storeenv.Redis(t).Addr())
	ctx := ctxFor(t, 60*time.Second)
	base := uniqueKey(t)
	k := base + ".k"
	t.Cleanup(func() {
		for _, s := range []string{k, base + ".x", base + ".y"} {
			c.Del(context.Background(), scriptKeys(s)...)
		}
	})
	h, d := newDriver(c), newDriver(c)
	reqs := func(owner string, keys ...string) []driver.Request {
		rs := make([]driver.Request, len(keys))
		for i, key := range keys {
			rs[i] = driver.Request{Key: key, Owner: owner + string(rune('0'+i)), Label: "l", TTL: 10 * time.Second}
		}
		return rs
	}
	if _, err := h.TryAcquireMulti(ctx, reqs("H", k)); err != nil {
		t.Fatalf("free key: %v", err)
	}
	ra, rb := reqs("A", k, base+".x"), reqs("B", k, base+".y")
	calls := make([]*multiCall, 2)
	for i, rs := range [][]driver.Request{ra, rb} {
		call, err := d.newMultiCall(rs, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.runMulti(ctx, rs, call); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("wait %d on a held key: got %v, want ErrHeld", i, err)
		}
		calls[i] = call
	}
	c.Del(ctx, name(kindLock, k)) // it expired: no release woke anyone
	ga, err := d.runMulti(ctx, ra, calls[0])
	if err != nil {
		t.Fatalf("after the expiry: %v", err)
	}
	if n := watchRecords(ctx, t, c, k, d.lid); n != 1 {
		t.Fatalf("after one wait of a Locker took the key, %d records of that Locker's waits are left with it, want 1 (the other wait's): the release of the key would not wake the other", n)
	}
	ls := []driver.Lease{{Key: ra[0].Key, Owner: ra[0].Owner, Token: ga[0].Token, State: ga[0].State}}
	if errs, err := d.ReleaseMulti(ctx, ls); errors.Join(append(errs, err)...) != nil {
		t.Fatalf("ReleaseMulti: %v %v", errs, err)
	}
	if n := watchRecords(ctx, t, c, k, d.lid); n != 0 {
		t.Errorf("the release of the key left %d records of LockMulti waits, want the last one consumed", n)
	}
}
