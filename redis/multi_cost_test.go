package redis

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestMultiScriptCommands counts the commands the multi-key scripts run
// (MONITOR shows each script call and then the commands it ran), in the
// steps of a contended LockMulti: taking free keys, an attempt that finds
// them held and records its Locker, the release that wakes it, its
// successful attempt, and a release nobody waits for. The counts include
// the EVALSHA. A wait told that the release consumed its record sends no
// HDEL for it; the successful attempt removes the record its call made
// when no release woke it. A release that wakes a wait and records its
// Locker's next one (multi_next.go) learns from the wake-up whether it
// woke a LockMulti: one HSET more than a release that only wakes.
func TestMultiScriptCommands(t *testing.T) {
	c, addr, ctx, base, keys := multiCostKeys(t)
	a, b := newDriver(c), newDriver(c)
	// Loaded before MONITOR starts: a NOSCRIPT round would count too.
	for _, s := range []string{includeKind(multiAcquireLua), includeWatch(multiReleaseLua)} {
		if err := c.ScriptLoad(ctx, s).Err(); err != nil {
			t.Fatal(err)
		}
	}
	reqs := func(owner string) []driver.Request { return multiReqs(keys, owner) }
	leases := multiLeases
	released := func(d *redisDriver, ls []driver.Lease) {
		t.Helper()
		errs, err := d.ReleaseMulti(ctx, ls)
		if err = errors.Join(append(errs, err)...); err != nil {
			t.Fatalf("ReleaseMulti: %v", err)
		}
	}
	watched := func() bool {
		t.Helper()
		return watchRecords(ctx, t, c, keys[0], b.lid) > 0
	}

	m := startMonitor(t, addr)
	ra, rb, rc := reqs("A"), reqs("B"), reqs("C")
	ga, call := takeThenWait(ctx, t, a, b, ra, rb)
	if !watched() {
		t.Fatal("an attempt that found the keys held did not record its Locker with the first")
	}
	released(a, leases(ra, ga))
	if watched() {
		t.Error("the release that freed the key left the record of the Locker it woke")
	}
	// The wake-up "free <wid> 1" tells the wait, as AcquireMulti applies
	// it (TestLockMultiWokenByRelease takes the notifier's path).
	call.consumed(0, 1)
	gb, err := b.runMulti(ctx, rb, call)
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	released(b, leases(rb, gb))

	// A record that no release consumed (the keys expired, here deleted):
	// the successful attempt removes it.
	gc, err := a.TryAcquireMulti(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	rb = reqs("D")
	if call, err = b.newMultiCall(rb, true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.runMulti(ctx, rb, call); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("held keys: got %v, want ErrHeld", err)
	}
	for _, l := range leases(rc, gc) {
		c.Del(ctx, leaseKey(l))
	}
	gb, err = b.runMulti(ctx, rb, call)
	if err != nil {
		t.Fatalf("after the expiry: %v", err)
	}
	if watched() {
		t.Error("a successful attempt left the record of its Locker made by an earlier attempt of its call")
	}

	// A release of a Locker whose channels are subscribed (from an earlier
	// wait) wakes the first of two waits and records the Locker's next
	// wait (multi_next.go). No LockMulti adopts that record here, so its
	// Locker gives it up, after the grace time and then a wake-up or the
	// bound; the grace time is an hour, so that the check below depends on
	// no timing.
	a.next.grace = time.Hour
	for _, k := range keys {
		var reg registration
		if ok, err := a.notify.add(k, newWaiter(""), false, &reg); !ok {
			t.Fatalf("a waiter of the releasing Locker: %v", err)
		}
		t.Cleanup(reg.leave)
	}
	t.Cleanup(func() { _ = a.Close() })
	released(b, leases(rb, gb))
	ra = reqs("E")
	if ga, err = a.TryAcquireMulti(ctx, ra); err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"F", "G"} {
		rb = reqs(owner)
		if call, err = b.newMultiCall(rb, true); err != nil {
			t.Fatal(err)
		}
		if _, err := b.runMulti(ctx, rb, call); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("held keys: got %v, want ErrHeld", err)
		}
	}
	released(a, leases(ra, ga))
	if watchRecords(ctx, t, c, keys[0], a.lid) != 1 {
		t.Error("the release that woke a LockMulti recorded no next wait of its Locker")
	}

	steps := []costStep{
		{"taking three free keys", 10},
		{"finding the first key held, recording the Locker", 6},
		{"releasing three keys, waking the Locker recorded", 8},
		{"taking three free keys, its record consumed by the release", 10},
		{"releasing three keys nobody waits for", 4},
		{"taking three free keys", 10},
		{"finding the first key held, recording the Locker", 6},
		{"taking three free keys, removing a record", 11},
		{"releasing three keys, a waiters hash with only \" watched\" left", 7},
		{"taking three free keys", 10},
		{"finding the first key held, recording the Locker", 6},
		{"finding the first key held, recording a second wait", 6},
		{"releasing three keys, waking the first wait recorded and recording the next wait", 10},
	}
	m.expect(ctx, t, base, steps)
}

// TestMultiReleaseKeepsWatched counts the commands of a release that wakes
// the only LockMulti recorded with a key and records its Locker's next
// wait there (multi_next.go): the waiters hash keeps " watched", so the
// release writes the new record alone and renews the hash's expiry
// (PEXPIRE), without removing " watched" and writing it again (HDEL,
// HSET, PTTL, PEXPIRE). The hash keeps " watched" and an expiry.
func TestMultiReleaseKeepsWatched(t *testing.T) {
	c, addr, ctx, base, keys := multiCostKeys(t)
	a, b := newDriver(c), newDriver(c)
	t.Cleanup(func() { _ = a.Close() })
	// The next wait stays until Close: nothing adopts it, and the checks
	// below depend on no timing (TestMultiScriptCommands).
	a.next.grace = time.Hour
	loadScripts(ctx, t, c, a.multiAcquire, a.multiRelease)
	for _, k := range keys {
		var reg registration
		if ok, err := a.notify.add(k, newWaiter(""), false, &reg); !ok {
			t.Fatalf("a waiter of the releasing Locker: %v", err)
		}
		t.Cleanup(reg.leave)
	}
	reqs := func(owner string) []driver.Request { return multiReqs(keys, owner) }

	m := startMonitor(t, addr)
	ra := reqs("A")
	ga, _ := takeThenWait(ctx, t, a, b, ra, reqs("B"))
	errs, err := a.ReleaseMulti(ctx, multiLeases(ra, ga))
	if err = errors.Join(append(errs, err)...); err != nil {
		t.Fatalf("ReleaseMulti: %v", err)
	}
	watch := name(kindWaiters, keys[0])
	if watchRecords(ctx, t, c, keys[0], b.lid) != 0 || watchRecords(ctx, t, c, keys[0], a.lid) != 1 {
		t.Error("the release did not replace the record of the Locker it woke with its own Locker's next wait")
	}
	if !c.HExists(ctx, watch, " watched").Val() {
		t.Error("the waiters hash lost \" watched\" while it records a wait")
	}
	if ms := c.PTTL(ctx, watch).Val(); ms <= 0 {
		t.Errorf("the waiters hash that records the next wait has no expiry (PTTL %v)", ms)
	}
	m.expect(ctx, t, base, []costStep{
		{"taking three free keys", 10},
		{"finding the first key held, recording the Locker", 6},
		{"releasing three keys, waking the only wait recorded and recording the next wait", 10},
	})
}

// TestMultiAttemptCommands counts the commands of a multi-key attempt
// (MONITOR) where a lean script saves them: taking free keys on a cut call
// reads the tombstone in the MGET of the keys, and a waiter's retry that
// finds the key held again, its record from the attempt before still
// there or others' (" watched"), adds nothing but its record (MGET, HSET,
// PTTL). A retry whose record a release consumed records the Locker
// again, and a waiters hash it creates expires. A cut single-key attempt
// (acquire.lua) reads its tombstone in its MGET too.
func TestMultiAttemptCommands(t *testing.T) {
	c, addr, ctx, base, keys := multiCostKeys(t) // ctx ends: b's calls are cut ones
	oc := newOwnedClient(clientOptions(addr))
	t.Cleanup(func() { _ = oc.Close() })
	a, b := newDriver(c), newDriver(oc)
	if !b.cuts(ctx) {
		t.Fatal("the attempts of a driver on an owned client with a ctx that ends must be cut ones")
	}
	loadScripts(ctx, t, c, a.multiAcquire, a.acquire)
	reqs := func(owner string) []driver.Request { return multiReqs(keys, owner) }
	free := func(gs []driver.Grant, rs []driver.Request) {
		for i, r := range rs {
			c.Del(ctx, leaseKey(driver.Lease{Key: r.Key, Owner: r.Owner, Token: gs[i].Token, State: gs[i].State}))
		}
	}
	watch := name(kindWaiters, keys[0])
	watched := func() bool {
		t.Helper()
		return watchRecords(ctx, t, c, keys[0], b.lid) > 0
	}

	m := startMonitor(t, addr)
	rb := reqs("B")
	gb, err := b.TryAcquireMulti(ctx, rb)
	if err != nil {
		t.Fatalf("free keys: %v", err)
	}
	free(gb, rb)
	ra := reqs("A")
	if _, err := a.TryAcquireMulti(ctx, ra); err != nil {
		t.Fatalf("free keys: %v", err)
	}
	rb = reqs("C")
	call, err := b.newMultiCall(rb, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := b.runMulti(ctx, rb, call); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("attempt %d on held keys: got %v, want ErrHeld", i+1, err)
		}
	}
	if !watched() {
		t.Fatal("a retry on the held key lost the record of its Locker")
	}
	// A release consumed the record, and others are left (" watched"
	// stays); then the last one: the next retry records its Locker again.
	field := call.args[3].(string)
	for _, fields := range [][]string{{field}, {field, " watched"}} {
		c.HDel(ctx, watch, fields...)
		if _, err := b.runMulti(ctx, rb, call); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("retry on held keys: got %v, want ErrHeld", err)
		}
		if !watched() || !c.HExists(ctx, watch, " watched").Val() {
			t.Error("a retry whose record was consumed did not record its Locker again, with \" watched\"")
		}
		if ms := c.PTTL(ctx, watch).Val(); ms <= 0 {
			t.Errorf("the waiters hash a retry recorded its Locker in has no expiry (PTTL %v)", ms)
		}
	}
	if _, err := b.TryAcquire(ctx, driver.Request{Key: keys[0], Owner: "D", Label: "l", TTL: 10 * time.Second}); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("single-key attempt on a held key: got %v, want ErrHeld", err)
	}
	c.Ping(ctx) // ends the last script's lines in MONITOR

	steps := []costStep{
		{"taking three free keys, the attempt a cut one", 10},
		{"taking three free keys", 10},
		{"finding the first key held, recording the Locker", 6},
		{"finding the first key held again, its record there", 5},
		{"finding the first key held again, its record consumed, others left", 5},
		{"finding the first key held again, its record consumed, the last", 6},
		{"a cut single-key attempt on a held key", 2},
	}
	m.expect(ctx, t, base, steps)
}

// multiCostKeys starts a test of the multi-key scripts' costs, in
// parallel: a client of the test server at addr, a ctx that ends, and three
// keys under base, whose names go when the test ends.
func multiCostKeys(t *testing.T) (c *goredis.Client, addr string, ctx context.Context, base string, keys []string) {
	t.Helper()
	t.Parallel()
	addr = storeenv.Redis(t).Addr()
	c = newClient(t, addr)
	ctx = ctxFor(t, 60*time.Second)
	base = uniqueKey(t)
	keys = []string{base + ".a", base + ".b", base + ".c"}
	t.Cleanup(func() {
		for _, k := range keys {
			c.Del(context.Background(), scriptKeys(k)...)
		}
	})
	return c, addr, ctx, base, keys
}

// multiReqs returns a request per key, owned by owner and the key's index.
func multiReqs(keys []string, owner string) []driver.Request {
	rs := make([]driver.Request, len(keys))
	for i, k := range keys {
		rs[i] = driver.Request{Key: k, Owner: owner + string(rune('0'+i)), Label: "l", TTL: 10 * time.Second}
	}
	return rs
}

// multiLeases returns the leases of grants gs of requests rs, with their
// TTLs, as the engine makes them: a release that records its Locker's next
// wait bounds it by the leases' refresh interval, which a lease without a
// TTL makes 10 ms.
func multiLeases(rs []driver.Request, gs []driver.Grant) []driver.Lease {
	ls := make([]driver.Lease, len(rs))
	for i, r := range rs {
		ls[i] = driver.Lease{Key: r.Key, Owner: r.Owner, Token: gs[i].Token, TTL: r.TTL, State: gs[i].State}
	}
	return ls
}

// takeThenWait has a take the free keys of ra, then b make an attempt on
// the same keys (rb) that finds them held and records b's Locker; it
// returns a's grants and b's call.
func takeThenWait(ctx context.Context, t *testing.T, a, b *redisDriver, ra, rb []driver.Request) ([]driver.Grant, *multiCall) {
	t.Helper()
	ga, err := a.TryAcquireMulti(ctx, ra)
	if err != nil {
		t.Fatalf("free keys: %v", err)
	}
	call, err := b.newMultiCall(rb, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.runMulti(ctx, rb, call); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("held keys: got %v, want ErrHeld", err)
	}
	return ga, call
}

// loadScripts loads scripts on c, so that a MONITOR started after it shows
// no NOSCRIPT round.
func loadScripts(ctx context.Context, t *testing.T, c goredis.Scripter, scripts ...*goredis.Script) {
	t.Helper()
	for _, s := range scripts {
		if err := s.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// monitor reads MONITOR on a connection of its own.
type monitor struct {
	conn  net.Conn
	lines chan string
}

// startMonitor starts MONITOR on the server at addr; it runs until the
// test ends.
func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	_ = conn.SetDeadline(time.Time{})
	m := &monitor{conn: conn, lines: make(chan string, 1024)}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case m.lines <- line:
			case <-done:
				return
			}
		}
	})
	t.Cleanup(func() {
		close(done)
		_ = conn.Close()
		wg.Wait()
	})
	return m
}

// costStep is a script call of a test that counts commands, and the most
// commands it may run.
type costStep struct {
	what string
	most int
}

// expect reads the commands of the script calls naming key (scripts), one
// call per step, and fails t for each step that ran more than its most.
func (m *monitor) expect(ctx context.Context, t *testing.T, key string, steps []costStep) {
	t.Helper()
	got := m.scripts(ctx, t, key, len(steps))
	t.Logf("commands per script: %v", got)
	for i, s := range steps {
		if got[i] > s.most {
			t.Errorf("%s ran %d commands, want at most %d", s.what, got[i], s.most)
		}
	}
}

// scripts returns how many commands each of the first n script calls
// naming key ran, the EVALSHA included. A script's commands follow its
// call, marked "lua]" (scripts are atomic); the next other line ends it.
func (m *monitor) scripts(ctx context.Context, t *testing.T, key string, n int) []int {
	t.Helper()
	var counts []int
	in := false
	for {
		var line string
		select {
		case line = <-m.lines:
		case <-ctx.Done():
			t.Fatalf("MONITOR showed %d of %d script calls", len(counts), n)
		}
		if strings.Contains(line, " lua] ") {
			if in {
				counts[len(counts)-1]++
			}
			continue
		}
		if in && len(counts) == n {
			return counts
		}
		in = strings.Contains(strings.ToLower(line), `"evalsha"`) && strings.Contains(line, key)
		if in {
			counts = append(counts, 1)
		}
	}
}
