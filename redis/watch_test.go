package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestReleaseWatchersCheck: a release that frees a key whose waiters hash
// records queued waiters but no LockMulti lists none of the hash's fields
// (no HKEYS: with many waiters that list is long, and an unfair release
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

	m := startMonitor(t, storeenv.Redis(t).Addr())
	r.release("A", "0")
	if r.acquire("X", "0") <= 0 {
		t.Fatal("X could not take the free key")
	}
	r.release("X", "0")
	r.holder() // a command after the scripts: their lines end
	for _, line := range m.scriptLines(ctx, t, key, 3) {
		if strings.Contains(strings.ToLower(line), `"hkeys"`) {
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
		call, err := d.newMultiCall(reqs, d.lid)
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
