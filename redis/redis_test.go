package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/storeenv"
)

// uniqueKey returns a store key of its own for the test.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

// ctxFor returns a context that ends after d or with the test.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// newTestLocker builds a Locker on client from a driver the test can inspect.
func newTestLocker(t testing.TB, client Client, opts ...locker.Option) (locker.Locker, *redisDriver) {
	t.Helper()
	d := newDriver(client)
	l, err := locker.New(d, opts...)
	if err != nil {
		t.Fatalf("locker.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, d
}

func TestNewRejectsNilClient(t *testing.T) {
	var typed *goredis.Client
	for name, c := range map[string]Client{"nil": nil, "typed nil *redis.Client": typed} {
		l, err := New(c)
		if l != nil || !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "nil redis client") {
			t.Errorf("New(%s) = %v, %v; want nil and an error matching ErrInvalidOption naming the client", name, l, err)
		}
	}
	srv := storeenv.Redis(t)
	if _, err := New(newClient(t, srv.Addr()), locker.WithTTL(time.Millisecond)); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("New with a bad option: %v, want an error matching ErrInvalidOption", err)
	}
}

// TestKeyNames checks the naming rules: the three names of a lock carry one
// hash tag, keys with braces included, and distinct keys never share names.
func TestKeyNames(t *testing.T) {
	keys := []string{"a", "orders:42", "{a}", "a{b", "a}b", "}", "}a", "{}", "}{", "{{}}", "x}y{z}", "a:fence", "a}:fence", "lock:a}", "ü}"}
	seen := map[string]string{}
	for _, k := range keys {
		names := []string{lockKey(k), fenceKey(k), channelName(k)}
		tag := hashTag(names[0])
		if tag == "" {
			t.Errorf("lockKey(%q) = %q has an empty hash tag", k, names[0])
		}
		for _, n := range names {
			if hashTag(n) != tag {
				t.Errorf("key %q: %q has hash tag %q, %q has %q; all names of a lock must share one", k, names[0], tag, n, hashTag(n))
			}
			if !strings.Contains(n, k) {
				t.Errorf("key %q: name %q does not contain the key", k, n)
			}
			if prev, dup := seen[n]; dup {
				t.Errorf("name %q is used by keys %q and %q", n, prev, k)
			}
			seen[n] = k
		}
	}
}

// hashTag returns what Redis Cluster hashes: the text between the first '{'
// and the first '}' after it when not empty, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// scriptRunner runs the scripts of d on one key, failing the test on errors.
type scriptRunner struct {
	// lids gives owners the Locker id they wait with (default "L").
	lids map[string]string
	// unfair runs the scripts in unfair mode (Config.Unfair).
	unfair bool
	t      *testing.T
	ctx    context.Context
	c      *goredis.Client
	d      *redisDriver
	key    string
}

// lid returns owner's Locker id.
func (r scriptRunner) lid(owner string) string {
	if lid, ok := r.lids[owner]; ok {
		return lid
	}
	return "L"
}

// mode is the scripts' unfair argument.
func (r scriptRunner) mode() string {
	if r.unfair {
		return "1"
	}
	return "0"
}

// acquire runs acquire.lua for owner: seq "0" is a single attempt, another
// seq an attempt of a waiting Lock.
func (r scriptRunner) acquire(owner, seq string) int64 {
	r.t.Helper()
	n, err := r.d.acquire.Run(r.ctx, r.c, scriptKeys(r.key), owner, 10000, "label "+owner, 60000, seq, 5000, channelName(r.key), r.lid(owner), r.mode()).Int64()
	if err != nil {
		r.t.Fatalf("acquire script: %v", err)
	}
	return n
}

// release runs release.lua for owner; leave "1" also leaves the queue.
func (r scriptRunner) release(owner, leave string) int64 {
	r.t.Helper()
	n, err := r.d.release.Run(r.ctx, r.c, scriptKeys(r.key), owner, channelName(r.key), 60000, leave, r.mode()).Int64()
	if err != nil {
		r.t.Fatalf("release script: %v", err)
	}
	return n
}

func (r scriptRunner) renew(owner string, ttl int64) int64 {
	r.t.Helper()
	n, err := r.d.renew.Run(r.ctx, r.c, []string{lockKey(r.key)}, owner, ttl).Int64()
	if err != nil {
		r.t.Fatalf("renew script: %v", err)
	}
	return n
}

// holder returns the owner in the lock value, "" when free.
func (r scriptRunner) holder() string {
	v, _ := r.c.Get(r.ctx, lockKey(r.key)).Result()
	owner, _, _ := strings.Cut(v, " ")
	return owner
}

// queued returns the owners in the queue, in order.
func (r scriptRunner) queued() []string {
	return r.c.ZRange(r.ctx, name(kindQueue, r.key), 0, -1).Val()
}

// fresh makes every queued owner a waiter that arrived just now, whatever
// the time the calls took, keeping their order: an unfair release frees
// the key then instead of handing it over to a first waiter that starves
// (starveAfter). It moves their arrivals an hour ahead.
func (r scriptRunner) fresh() {
	r.t.Helper()
	r.arrive(time.Hour)
}

// arrive moves the arrival of every queued owner by d, keeping their order.
func (r scriptRunner) arrive(d time.Duration) {
	r.t.Helper()
	q := name(kindQueue, r.key)
	zs, err := r.c.ZRangeWithScores(r.ctx, q, 0, -1).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, z := range zs {
		z.Score += float64(d / time.Microsecond)
		if err := r.c.ZAddXX(r.ctx, q, z).Err(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// TestScripts runs every branch of the scripts against a real server.
func TestScripts(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := ctxFor(t, 30*time.Second)
	for _, key := range []string{uniqueKey(t), "}" + uniqueKey(t)} { // both name forms
		t.Run("", func(t *testing.T) {
			t.Cleanup(func() { c.Del(context.Background(), scriptKeys(key)...) })
			testScripts(t, scriptRunner{t: t, ctx: ctx, c: c, d: newDriver(c), key: key})
		})
	}
}

func testScripts(t *testing.T, r scriptRunner) {
	ctx, c, key := r.ctx, r.c, r.key
	lk, fk := lockKey(key), fenceKey(key)
	ps := c.Subscribe(ctx, channelName(key)+":L") // Locker L's channel

	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	message := func() string {
		t.Helper()
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("no message on the channel: %v", err)
		}
		return m.Payload
	}
	noMessage := func(what string) {
		t.Helper()
		m, err := ps.ReceiveTimeout(ctx, 50*time.Millisecond)
		if err == nil {
			t.Errorf("%s published %v; want no message", what, m)
		}
	}

	// Free key: taken, token about the server's clock in microseconds.
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	tokA := r.acquire("A", "0")
	if tokA < now.UnixMicro() {
		t.Fatalf("acquire on a free key = %d; want a token >= %d", tokA, now.UnixMicro())
	}
	if v := c.Get(ctx, lk).Val(); v != fmt.Sprintf("A %d label A", tokA) {
		t.Errorf("lock value = %q; want owner, token and label", v)
	}
	if pttl := c.PTTL(ctx, lk).Val(); pttl <= 0 || pttl > 10*time.Second {
		t.Errorf("lock PTTL = %v; want (0, 10s]", pttl)
	}
	if v := c.Get(ctx, fk).Val(); v != fmt.Sprint(tokA) {
		t.Errorf("fence key = %q; want the token %d", v, tokA)
	}
	if pttl := c.PTTL(ctx, fk).Val(); pttl <= 0 || pttl > time.Minute {
		t.Errorf("fence key PTTL = %v; want the retention (0, 60s]", pttl)
	}

	// The holder again (a retried call, or a hand-over being confirmed):
	// same token, expiry renewed.
	c.PExpire(ctx, lk, time.Second)
	if got := r.acquire("A", "0"); got != tokA {
		t.Errorf("acquire by the holder again = %d; want its token %d", got, tokA)
	}
	if pttl := c.PTTL(ctx, lk).Val(); pttl <= time.Second {
		t.Errorf("acquire by the holder did not renew the expiry (PTTL %v)", pttl)
	}
	// An owner whose token is a prefix of the holder's is another owner.
	c.Set(ctx, lk, fmt.Sprintf("AB %d label", tokA), 10*time.Second)
	if got := r.acquire("A", "0"); got > 0 {
		t.Errorf("acquire by A while AB holds = %d; want refused", got)
	}
	c.Set(ctx, lk, fmt.Sprintf("A %d label A", tokA), 10*time.Second)
	// Another owner, single attempt: refused (remaining time not asked),
	// not queued.
	if got := r.acquire("B", "0"); got != 0 {
		t.Errorf("single attempt by another owner = %d; want 0", got)
	}
	if q := r.queued(); len(q) != 0 {
		t.Errorf("a single attempt queued: %v", q)
	}

	// Waiting attempts are refused with -1-PTTL and queue in arrival order;
	// a later attempt refreshes the record but keeps the place.
	if got := r.acquire("B", "1"); got >= -1 || got < -10001 {
		t.Errorf("waiting attempt by another owner = %d; want -1-pttl with pttl in (0, 10000]", got)
	}
	r.acquire("C", "1")
	r.acquire("B", "2")
	if q := r.queued(); !slices.Equal(q, []string{"B", "C"}) {
		t.Fatalf("queue = %v; want [B C]", q)
	}
	rec := c.HGet(ctx, name(kindWaiters, key), "B").Val()
	if f := strings.Fields(rec); len(f) != 7 || f[1] != "2" || f[2] != "10000" || f[3] != "L" || !strings.HasPrefix(f[4], "w") || f[5]+" "+f[6] != "label B" {
		t.Errorf("waiter record of B = %q; want <deadline> 2 10000 L w<wake> label B", rec)
	} else {
		// B found A's lock held for about 10 s: it tries again within its
		// refresh interval, a third of the stale time (5000 ms).
		deadline, _ := strconv.ParseInt(f[0], 10, 64)
		wake, _ := strconv.ParseInt(f[4][1:], 10, 64)
		if at := wake - (deadline - 5000); at < 5000/3 || at > 5000/3+5000/30+3 {
			t.Errorf("waiter record of B = %q: wake %d ms after the attempt; want its refresh interval, about 1667 ms, and a tenth", rec, at)
		}
	}
	for _, k := range []string{name(kindQueue, key), name(kindWaiters, key)} {
		if pttl := c.PTTL(ctx, k).Val(); pttl <= 0 || pttl > 10*time.Second {
			t.Errorf("%s PTTL = %v; want (0, 10s]: a queue nobody refreshes must vanish", k, pttl)
		}
	}

	// Renew: by another owner refused, by the holder extends.
	if n := r.renew("B", 50000); n != 0 {
		t.Errorf("renew by another owner = %d; want 0", n)
	}
	if n := r.renew("A", 50000); n != 1 {
		t.Errorf("renew by the holder = %d; want 1", n)
	}
	if pttl := c.PTTL(ctx, lk).Val(); pttl <= 10*time.Second {
		t.Errorf("PTTL after renew = %v; want > 10s", pttl)
	}

	// Release by another owner: refused, nothing changes.
	if n := r.release("B", "0"); n != 0 || r.holder() != "A" {
		t.Errorf("release by another owner = %d, holder %q; want 0 and A", n, r.holder())
	}
	// Release by the holder: handed over to the first waiter, B, with a new
	// token and B's TTL, and a grant naming B's last attempt.
	if n := r.release("A", "0"); n != 1 {
		t.Fatalf("release by the holder = %d; want 1", n)
	}
	g, ok := parseGrant(message())
	tokB, _ := strconv.ParseInt(strings.Fields(c.Get(ctx, lk).Val())[1], 10, 64)
	if !ok || g.owner != "B" || g.seq != 2 || g.ttl != 500*time.Millisecond || int64(g.token) != tokB || tokB <= tokA {
		t.Errorf("hand-over: grant %+v (ok %v), lock token %d; want owner B, seq 2, the claim window of 500ms, the lock's token > %d", g, ok, tokB, tokA)
	}
	if pttl := c.PTTL(ctx, lk).Val(); pttl > 500*time.Millisecond {
		t.Errorf("PTTL after the hand-over = %v; want the claim window, at most 500ms", pttl)
	}
	if r.holder() != "B" || !slices.Equal(r.queued(), []string{"C"}) {
		t.Errorf("after hand-over: holder %q, queue %v; want B and [C]", r.holder(), r.queued())
	}
	if got := r.acquire("B", "3"); got != tokB {
		t.Errorf("B confirming the hand-over = %d; want its token %d", got, tokB)
	}
	if pttl := c.PTTL(ctx, lk).Val(); pttl <= 500*time.Millisecond {
		t.Errorf("PTTL after B confirmed = %v; want B's TTL", pttl)
	}

	// A waiter whose deadline passed is skipped and dropped.
	c.HSet(ctx, name(kindWaiters, key), "C", "1 1 10000 L label C")
	r.acquire("D", "1")
	if n := r.release("B", "0"); n != 1 || r.holder() != "D" {
		t.Errorf("release with a dead waiter first: %d, holder %q; want the next live waiter D", n, r.holder())
	}
	if g, _ := parseGrant(message()); g.owner != "D" {
		t.Errorf("grant to %q; want D", g.owner)
	}
	if q := r.queued(); len(q) != 0 {
		t.Errorf("queue = %v; want the dead waiter dropped", q)
	}

	// A waiter that gives up leaves the queue, and passes on a lock handed
	// over to it meanwhile.
	r.acquire("E", "1")
	r.acquire("F", "1")
	if n := r.release("E", "1"); n != 0 || !slices.Equal(r.queued(), []string{"F"}) {
		t.Errorf("E leaving = %d, queue %v; want 0 and [F]", n, r.queued())
	}
	noMessage("a waiter leaving")
	if n := r.release("D", "0"); n != 1 || r.holder() != "F" {
		t.Fatalf("release to F: %d, holder %q", n, r.holder())
	}
	message()
	r.acquire("G", "1")
	if n := r.release("F", "1"); n != 1 || r.holder() != "G" {
		t.Errorf("F leaving while handed the lock = %d, holder %q; want 1 and the lock passed on to G", n, r.holder())
	}
	message()

	// Last waiter gone: release deletes the lock. The Locker of a waiter
	// that counted as gone gets a "free" message (it may only be paused);
	// otherwise nothing is published.
	c.HSet(ctx, name(kindWaiters, key), "H", "1 1 10000 L label H")
	c.ZAdd(ctx, name(kindQueue, key), goredis.Z{Score: 1, Member: "H"})
	if n := r.release("G", "0"); n != 1 || r.holder() != "" {
		t.Errorf("release with only a dead waiter = %d, holder %q; want the lock deleted", n, r.holder())
	}
	if m := message(); m != "free" {
		t.Errorf("message = %q; want free", m)
	}
	tok := r.acquire("I", "0")
	if n := r.release("I", "0"); n != 1 || r.holder() != "" {
		t.Errorf("release without waiters = %d, holder %q", n, r.holder())
	}
	noMessage("a release nobody waits for")
	// Gone: release and renew refused, nothing created.
	if n := r.release("I", "0"); n != 0 {
		t.Errorf("release of a deleted lock = %d; want 0", n)
	}
	if n := r.renew("I", 1000); n != 0 || c.Exists(ctx, lk).Val() != 0 {
		t.Errorf("renew of a deleted lock = %d; want 0 and no key created", n)
	}

	// A free lock with a live waiter goes to that waiter, even on another
	// owner's attempt (after the holder expired without releasing).
	r.acquire("J", "0")
	r.acquire("K", "1")
	c.Del(ctx, lk) // expired
	if got := r.acquire("L", "0"); got > 0 || r.holder() != "K" {
		t.Errorf("TryLock of a free lock with K waiting = %d, holder %q; want refused and K holding", got, r.holder())
	}
	if g, _ := parseGrant(message()); g.owner != "K" || g.seq != 1 {
		t.Errorf("grant %+v; want K, seq 1", g)
	}
	r.release("K", "0")

	// The next token follows the last one even when the clock says less.
	const high = 8_000_000_000_000_000
	c.Set(ctx, fk, high, 0)
	if got := r.acquire("M", "0"); got != high+1 || tok >= high {
		t.Errorf("acquire after fence %d = %d; want %d", int64(high), got, int64(high+1))
	}
	r.release("M", "0")

	// A key without expiry (set by someone else): refused with 0, which the
	// driver reports as an unknown remaining time.
	c.Set(ctx, lk, "someone", 0)
	if got := r.acquire("N", "1"); got != 0 {
		t.Errorf("waiting attempt on a key without expiry = %d; want 0", got)
	}
	r.release("N", "1")
	_, err = r.d.TryAcquire(ctx, driver.Request{Key: key, Owner: "N", TTL: time.Second})
	if !errors.Is(err, driver.ErrHeld) || driver.Remaining(err) != 0 {
		t.Errorf("TryAcquire on a key without expiry: %v (remaining %v); want ErrHeld with no remaining time", err, driver.Remaining(err))
	}
}

// countingHook counts commands and pipelines.
type countingHook struct {
	dials     atomic.Int64 // connections dialled
	commands  atomic.Int64 // commands sent alone
	evals     atomic.Int64 // EVAL (not EVALSHA) calls, single or pipelined
	pipelines atomic.Int64 // pipeline round trips
	piped     atomic.Int64 // commands sent in pipelines
	pipeTime  atomic.Int64 // nanoseconds spent in pipelines
}

func (h *countingHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *countingHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.commands.Add(1)
		if cmd.Name() == "eval" {
			h.evals.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.pipelines.Add(1)
		h.piped.Add(int64(len(cmds)))
		for _, c := range cmds {
			if c.Name() == "eval" {
				h.evals.Add(1)
			}
		}
		start := time.Now()
		defer func() { h.pipeTime.Add(int64(time.Since(start))) }()
		return next(ctx, cmds)
	}
}

// starvedLoss returns lk's loss when no renewal came back in time
// (rerun.StarvedLoss: a round says nothing, and runs again), and nil
// otherwise.
func starvedLoss(lk locker.Lock) error {
	return rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal)
}

// TestNoScriptFallback flushes the server's script cache under a Locker:
// acquire, renew (pipelined) and release fall back to EVAL and keep working.
// A round in which the lock was lost only because no renewal came back in
// time (rerun.StarvedLoss) runs again, up to three rounds; a renewal the
// server answered (NOSCRIPT) fails at once. It is not parallel: the tests marked parallel (which count round trips)
// run after it, so that SCRIPT FLUSH does not disturb them.
func TestNoScriptFallback(t *testing.T) {
	srv := storeenv.Redis(t)
	c := newClient(t, srv.Addr())
	hook := &countingHook{}
	c.AddHook(hook)
	admin := newClient(t, srv.Addr())
	ttl := 600 * time.Millisecond
	l, _ := newTestLocker(t, c, locker.WithTTL(ttl))
	ctx := ctxFor(t, 30*time.Second)

	first, err := l.TryLock(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	flush := func() {
		t.Helper()
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A round in which the lock was lost only because no renewal came
	// back in time says nothing, and runs again on a key of its own.
	rerun.Starved(t, 3, func(int) error {
		key := uniqueKey(t)
		// The server is shared with other packages' tests, whose own EVAL
		// may load a script again between the flush and our call: flush
		// until one of our calls had to fall back.
		var lk locker.Lock
		for attempt := 0; ; attempt++ {
			flush()
			before := hook.evals.Load()
			if lk, err = l.TryLock(ctx, key); err != nil {
				t.Fatalf("TryLock after SCRIPT FLUSH: %v", err)
			}
			if hook.evals.Load() > before {
				break
			}
			if attempt == 20 {
				t.Fatalf("no EVAL was sent after SCRIPT FLUSH in %d attempts; the fallback was not exercised", attempt+1)
			}
			if err := lk.Unlock(ctx); err != nil {
				if s := starvedLoss(lk); s != nil {
					return s
				}
				t.Fatal(err)
			}
		}

		for attempt := 0; ; attempt++ {
			flush()
			before := hook.evals.Load()
			time.Sleep(ttl) // renewals every TTL/3
			if err := lk.Err(); err != nil {
				if s := starvedLoss(lk); s != nil {
					return s
				}
				t.Fatalf("lock lost across renewals after SCRIPT FLUSH: %v", err)
			}
			if hook.evals.Load() > before {
				break
			}
			if attempt == 20 {
				t.Fatalf("no EVAL was sent by the renewals after SCRIPT FLUSH in %d attempts", attempt+1)
			}
		}

		flush()
		if err := lk.Unlock(ctx); err != nil {
			if s := starvedLoss(lk); s != nil {
				return s
			}
			t.Fatalf("Unlock after SCRIPT FLUSH: %v", err)
		}
		if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
			t.Errorf("the lock key survived Unlock")
		}
		return nil
	})
}

// TestWakeByPublish holds a key with a 30 s TTL and checks that a waiter
// gets it soon after Unlock: only the release message can wake it that
// early.
func TestWakeByPublish(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(30*time.Second))
	waiter, wd := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(30*time.Second))
	ctx := ctxFor(t, 60*time.Second)
	key := uniqueKey(t)

	lk, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAndUnlock(ctx, waiter, key)
	waitSubscribers(t, ctx, admin, channelName(key), 1)
	released := time.Now()
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
		t.Logf("waiter got the key %v after Unlock", time.Since(released))
	case <-time.After(10 * time.Second):
		t.Fatalf("the waiter did not get the key within 10s of Unlock (holder TTL 30s): the release did not wake it")
	}
	// The waiter's subscription goes once it stopped waiting.
	waitSubscribers(t, ctx, admin, channelName(key), 0)
	_ = wd
}

// waitSubscribers polls until the channels of store key s's base channel
// (one per Locker with waiters: base + ":" + its id) have n subscribers in
// all.
func waitSubscribers(t testing.TB, ctx context.Context, c *goredis.Client, base string, n int64) {
	t.Helper()
	for {
		chans, err := c.PubSubChannels(ctx, globEscape(base)+":*").Result()
		if err != nil {
			t.Fatalf("PUBSUB CHANNELS: %v", err)
		}
		var total int64
		if len(chans) > 0 {
			m, err := c.PubSubNumSub(ctx, chans...).Result()
			if err != nil {
				t.Fatalf("PUBSUB NUMSUB: %v", err)
			}
			for _, k := range m {
				total += k
			}
		}
		if total == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the channels of %s have %d subscribers, want %d", base, total, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitQueued polls until n Locks wait in the queue of store key.
func waitQueued(t testing.TB, ctx context.Context, c *goredis.Client, key string, n int64) {
	t.Helper()
	for c.ZCard(ctx, name(kindQueue, key)).Val() != n {
		select {
		case <-ctx.Done():
			t.Fatalf("the queue of %s never had %d waiters", key, n)
		case <-time.After(time.Millisecond):
		}
	}
}

// slowAttemptHook delays the reply of every refused acquire attempt, after
// signalling it on refused: the holder can release while the waiter has
// queued but not yet seen the reply to its attempt.
type slowAttemptHook struct {
	script  *goredis.Script
	refused chan struct{}
}

func (h *slowAttemptHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *slowAttemptHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		isAcquire := len(args) > 1 && (args[1] == h.script.Hash() || args[1] == include(acquireLua))
		if c, ok := cmd.(*goredis.Cmd); ok && isAcquire && err == nil {
			if n, _ := c.Int64(); n <= 0 {
				select {
				case h.refused <- struct{}{}:
				default:
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		return err
	}
}

func (h *slowAttemptHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestHandOverRace releases a key while the waiter's first attempt, which
// queued it, is still on its way back: the hand-over is published before
// the waiter knows it waits, and must not be missed, whether the waiter's
// Locker already has the key's channel subscribed (a wait shortly before) or
// not. A missed one would leave the waiter until its next refresh, TTL/3 =
// 10 s here.
func TestHandOverRace(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	ctx := ctxFor(t, 60*time.Second)
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(30*time.Second))
	wc := newClient(t, srv.Addr())
	waiter, wd := newTestLocker(t, wc, locker.WithTTL(30*time.Second))
	hook := &slowAttemptHook{script: wd.acquire, refused: make(chan struct{}, 1)}
	wc.AddHook(hook)
	key := uniqueKey(t)
	for i := range 3 {
		lk, err := holder.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := lockAndUnlock(ctx, waiter, key)
		<-hook.refused
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the waiter did not get the key within 5s of Unlock: the hand-over was missed", i)
		}
	}
}

// TestPubSubLifecycle checks that uncontended locking never opens the pub/sub
// connection, that contended waiting uses one subscription per key whatever
// the number of waiting goroutines, and that Close leaves no subscription.
func TestPubSubLifecycle(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 60*time.Second)
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(20*time.Second))
	l, d := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(20*time.Second))
	key := uniqueKey(t)

	for range 10 {
		lk, err := l.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	d.notify.mu.Lock()
	started := d.notify.started
	d.notify.mu.Unlock()
	if started {
		t.Errorf("uncontended Lock/Unlock opened the pub/sub connection")
	}

	keys := []string{key + "-a", key + "-b"}
	var held []locker.Lock
	for _, k := range keys {
		lk, err := holder.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lk)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, k := range keys {
		for range 3 {
			wg.Go(func() {
				if _, err := l.Lock(wctx, k); !errors.Is(err, context.Canceled) {
					t.Errorf("waiting Lock: %v; want it cancelled", err)
				}
			})
		}
	}
	for _, k := range keys {
		waitSubscribers(t, ctx, admin, channelName(k), 1)
	}
	cancel()
	wg.Wait()
	for _, k := range keys {
		waitSubscribers(t, ctx, admin, channelName(k), 0)
	}

	// Wait again, then Close while waiting.
	errs := make(chan error, 1)
	go func() {
		_, err := l.Lock(ctx, keys[0])
		errs <- err
	}()
	waitSubscribers(t, ctx, admin, channelName(keys[0]), 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Lock waiting during Close: %v; want ErrClosed", err)
	}
	waitSubscribers(t, ctx, admin, channelName(keys[0]), 0)
	for _, lk := range held {
		_ = lk.Unlock(ctx)
	}
}

// faultHook makes the first successful acquire script call (EVALSHA, or
// EVAL after NOSCRIPT) fail with a broken connection after the server ran it:
// the outcome the caller sees is unknown.
type faultHook struct {
	script  *goredis.Script
	tripped atomic.Bool
}

func (h *faultHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *faultHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		isAcquire := len(args) > 1 && (args[1] == h.script.Hash() || args[1] == include(acquireLua))
		if err == nil && isAcquire && h.tripped.CompareAndSwap(false, true) {
			err = fmt.Errorf("read tcp: %w", io.ErrUnexpectedEOF)
			cmd.SetErr(err)
		}
		return err
	}
}

func (h *faultHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestUnknownOutcomeCleansUp: an acquisition that ran on the server but whose
// reply was lost is reported as an error, not as "not acquired", and leaves no
// phantom holder.
func TestUnknownOutcomeCleansUp(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	c := newClient(t, srv.Addr())
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 30*time.Second)
	l, d := newTestLocker(t, c, locker.WithTTL(20*time.Second))
	c.AddHook(&faultHook{script: d.acquire})
	key := uniqueKey(t)

	_, err := l.TryLock(ctx, key)
	if err == nil || errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("TryLock with a lost reply: %v; want the connection error, not ErrNotAcquired", err)
	}
	if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
		t.Fatalf("the acquisition with an unknown outcome left the key held (phantom holder until TTL)")
	}
	lk, err := l.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after the cleanup: %v", err)
	}
	_ = lk.Unlock(ctx)
}

func TestMaybeExecuted(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{goredis.ErrClosed, false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{goredis.ErrPoolTimeout, false},
		{fmt.Errorf("wrapped: %w", errors.New("x")), true},
		{io.EOF, true},
		{&net.OpError{Op: "read", Err: errors.New("reset")}, true},
		{context.Canceled, true},
		{context.DeadlineExceeded, true},
	} {
		if got := maybeExecuted(tc.err); got != tc.want {
			t.Errorf("maybeExecuted(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
	// A real error reply from the server.
	srv := storeenv.Redis(t)
	c := newClient(t, srv.Addr())
	err := c.Do(t.Context(), "NOSUCHCOMMAND").Err()
	if err == nil || maybeExecuted(err) {
		t.Errorf("maybeExecuted(%v) = true; want false for an error reply", err)
	}
}

// TestRenewalRoundTrips holds many locks and checks that each renewal tick
// is one pipeline, not one round trip per lock. A round in which a lock
// was lost only because no renewal came back in time (rerun.StarvedLoss:
// renewals starved on a loaded machine, as the contract allows) runs
// again, up to three rounds (docs/design.md, "Tests on a loaded
// machine"); a lock lost any other way (a renewal the store refused or
// answered with an error) fails at once.
func TestRenewalRoundTrips(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	rerun.Starved(t, 3, func(int) error { return renewalRoundTrips(t, srv.Addr()) })
}

// renewalRoundTrips is one round of TestRenewalRoundTrips. It returns a
// starved loss of one of its locks when no lock was lost otherwise, and
// fails t on any other fault.
func renewalRoundTrips(t *testing.T, addr string) error {
	c := newClient(t, addr)
	hook := &countingHook{}
	c.AddHook(hook)
	ttl := 900 * time.Millisecond
	l, _ := newTestLocker(t, c, locker.WithTTL(ttl))
	ctx := ctxFor(t, 60*time.Second)
	base := uniqueKey(t)
	const n = 500
	var locks []locker.Lock
	defer func() {
		for _, lk := range locks {
			_ = lk.Unlock(ctx)
		}
	}()
	for i := range n {
		lk, err := l.TryLock(ctx, fmt.Sprintf("%s-%d", base, i))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
	}
	time.Sleep(3 * ttl)
	var starved error
	for _, lk := range locks {
		if lk.Err() == nil {
			continue
		}
		if s := starvedLoss(lk); s != nil {
			starved = s
			continue
		}
		t.Fatalf("lock lost: %v", lk.Err())
	}
	if starved != nil {
		return starved
	}
	p, cmds := hook.pipelines.Load(), hook.piped.Load()
	t.Logf("%d renewals in %d pipelines", cmds, p)
	if cmds < n {
		t.Fatalf("only %d renewals of %d locks over 3 TTLs", cmds, n)
	}
	if p*20 > cmds {
		t.Errorf("%d renewals took %d pipelines; want them batched (one pipeline per tick)", cmds, p)
	}
	return nil
}

// TestClusterKeys locks keys with braces on the real Cluster (a name on
// another slot would fail with CROSSSLOT), checks with CLUSTER KEYSLOT that
// the three names of a lock share a slot, and that keys spread over every
// master.
func TestClusterKeys(t *testing.T) {
	t.Parallel()
	cl := storeenv.RedisCluster(t)
	admin := newCluster(t, cl.Addrs(), nil)
	ctx := ctxFor(t, 60*time.Second)
	a, _ := newTestLocker(t, newCluster(t, cl.Addrs(), nil), locker.WithTTL(2*time.Second))
	b, _ := newTestLocker(t, newCluster(t, cl.Addrs(), nil), locker.WithTTL(2*time.Second))
	base := uniqueKey(t)
	odd := []string{"}", "}x", "{a}", "a{b", "a}b{", "{}", "}{", "{{}}", "x}y{z}"}
	for _, o := range odd {
		key := o + base + o
		slots := map[int64]bool{}
		for _, n := range []string{lockKey(key), fenceKey(key), channelName(key)} {
			s, err := admin.ClusterKeySlot(ctx, n).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[s] = true
		}
		if len(slots) != 1 {
			t.Errorf("key %q: its names hash to slots %v; want one", key, slots)
		}
		lk, err := a.TryLock(ctx, key)
		if err != nil {
			t.Errorf("TryLock(%q): %v", key, err)
			continue
		}
		if _, err := b.TryLock(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
			t.Errorf("TryLock(%q) from another Locker while held: %v; want ErrNotAcquired", key, err)
		}
		got := lockAndUnlock(ctx, b, key)
		time.Sleep(50 * time.Millisecond)
		if err := lk.Unlock(ctx); err != nil {
			t.Errorf("Unlock(%q): %v", key, err)
		}
		if err := <-got; err != nil {
			t.Errorf("waiting Lock(%q): %v", key, err)
		}
	}

	masters := map[string]bool{}
	for i := range 64 {
		m, err := admin.MasterForKey(ctx, lockKey(fmt.Sprintf("%s-%d", base, i)))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != len(cl.Addrs()) {
		t.Errorf("64 keys landed on %d masters; want all %d", len(masters), len(cl.Addrs()))
	}
}

// TestFIFO: waiters get a released key in the order they started waiting,
// each handed the key by the release before it.
func TestFIFO(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 60*time.Second)
	key := uniqueKey(t)
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(20*time.Second))
	lk, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		w, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(20*time.Second))
		wg.Go(func() {
			wl, err := w.Lock(ctx, key)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			if err := wl.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: Unlock: %v", i, err)
			}
		})
		// The next waiter starts once this one is queued.
		for admin.ZCard(ctx, name(kindQueue, key)).Val() != int64(i+1) {
			if ctx.Err() != nil {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	if !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Errorf("waiters got the key in order %v; want arrival order", got)
	}
}

// TestCrashedWaiter: a waiter that vanishes while queued (its client closed)
// delays the key by at most about a TTL: the lock handed over to it expires
// and its queue entry is dropped once stale.
func TestCrashedWaiter(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 60*time.Second)
	key := uniqueKey(t)
	ttl := time.Second
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(ttl))
	lk, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}

	crashClient := newClient(t, srv.Addr())
	crashed, _ := newTestLocker(t, crashClient, locker.WithTTL(ttl))
	crashedDone := make(chan error, 1)
	go func() {
		_, err := crashed.Lock(ctx, key)
		crashedDone <- err
	}()
	waitQueued(t, ctx, admin, key, 1)
	_ = crashClient.Close()
	if err := <-crashedDone; err == nil {
		t.Fatal("Lock on a closed client succeeded")
	}

	survivor, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(ttl))
	got := lockAndUnlock(ctx, survivor, key)
	for admin.ZCard(ctx, name(kindQueue, key)).Val() < 1 {
		if !driver.Sleep(ctx, 2*time.Millisecond) {
			t.Fatal("the survivor's Lock never queued")
		}
	}
	released := time.Now()
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the surviving waiter got the key %v after Unlock", time.Since(released).Round(time.Millisecond))
	case <-time.After(10 * ttl):
		t.Fatal("the surviving waiter did not get the key within 10 TTLs: a crashed waiter blocks the queue")
	}
}

// TestHandOffTellsTwoLockers: a hand-over is announced to the granted
// waiter's Locker ("grant …") and to the next waiter's ("claim <ms>"), and
// to no other Locker, however many wait: a hand-off costs the same whatever
// the queue's length.
func TestHandOffTellsTwoLockers(t *testing.T) {
	t.Parallel()
	r := newScriptRunner(t, map[string]string{"A": "LA", "B": "LB", "C": "LC", "D": "LD"}, false)
	ctx, c, key := r.ctx, r.c, r.key
	subs := lockerChannels(t, ctx, c, key, "LB", "LC", "LD")
	if r.acquire("A", "0") <= 0 {
		t.Fatal("A could not take the free key")
	}
	for _, w := range []string{"B", "C", "D"} {
		if r.acquire(w, "1") >= 0 {
			t.Fatalf("%s was not queued", w)
		}
	}
	if n := r.release("A", "0"); n != 1 || r.holder() != "B" {
		t.Fatalf("release = %d, holder %q; want the key handed to B", n, r.holder())
	}
	// LD is third in line: nothing for it.
	expectMessages(t, ctx, subs, map[string]string{"LB": "grant B 1 ", "LC": "claim 500", "LD": ""})
}

// TestHandOffSkipsClaimForWaiterDueSooner: the next waiter in line is not
// told of a hand-over's claim when its record says that it tries again by
// then anyway (its last attempt found the key held for less than the
// claim window); a record without a wake, as an older version writes it,
// is told.
func TestHandOffSkipsClaimForWaiterDueSooner(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		strip bool // C's record loses its wake
		want  string
	}{{"due sooner", false, ""}, {"record without a wake", true, "claim 500"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newScriptRunner(t, map[string]string{"A": "LA", "B": "LB", "C": "LC", "E": "LE"}, false)
			ctx, rc, key := r.ctx, r.c, r.key
			lk := lockKey(key)
			subs := lockerChannels(t, ctx, rc, key, "LB", "LC")
			if r.acquire("A", "0") <= 0 {
				t.Fatal("A could not take the free key")
			}
			// A's lock runs out in 300 ms and A never releases it: B and
			// C try again by then.
			rc.PExpire(ctx, lk, 300*time.Millisecond)
			for _, w := range []string{"B", "C"} {
				if got := r.acquire(w, "1"); got >= 0 || got < -301 {
					t.Fatalf("waiting attempt of %s = %d; want -1-pttl with pttl in (0, 300]", w, got)
				}
			}
			if c.strip {
				waiters := name(kindWaiters, key)
				rec := rc.HGet(ctx, waiters, "C").Val()
				f := strings.Fields(rec)
				if len(f) < 5 || !strings.HasPrefix(f[4], "w") {
					t.Fatalf("waiter record of C = %q; want a wake", rec)
				}
				rc.HSet(ctx, waiters, "C", strings.Join(slices.Delete(f, 4, 5), " "))
			}
			for rc.Exists(ctx, lk).Val() == 1 {
				if !driver.Sleep(ctx, 10*time.Millisecond) {
					t.Fatal("A's lock never expired")
				}
			}
			// A newcomer's attempt hands the free key to B, the first in
			// line; C is next.
			if got := r.acquire("E", "1"); got >= 0 || r.holder() != "B" {
				t.Fatalf("attempt of E on the free key = %d, holder %q; want the key handed to B", got, r.holder())
			}
			expectMessages(t, ctx, subs, map[string]string{"LB": "grant B 1 ", "LC": c.want})
		})
	}
}

// TestUnfairScripts: in unfair mode a release frees the key and wakes only
// the first waiter's Locker ("free"), and a free key goes to whoever asks,
// queued or not (a queued taker leaves the queue).
func TestUnfairScripts(t *testing.T) {
	t.Parallel()
	r := newScriptRunner(t, map[string]string{"B": "LB", "C": "LC"}, true)
	ctx, c, key := r.ctx, r.c, r.key
	subs := lockerChannels(t, ctx, c, key, "LB", "LC")
	tokA := r.acquire("A", "0")
	if tokA <= 0 {
		t.Fatal("A could not take the free key")
	}
	r.acquire("B", "1")
	r.acquire("C", "1")
	r.fresh()
	if n := r.release("A", "0"); n != 1 || r.holder() != "" {
		t.Fatalf("unfair release = %d, holder %q; want 1 and the key free", n, r.holder())
	}
	// LC is second in line: nothing for it.
	expectMessages(t, ctx, subs, map[string]string{"LB": "free", "LC": ""})
	if !slices.Equal(r.queued(), []string{"B", "C"}) {
		t.Errorf("queue after the unfair release = %v; want [B C]", r.queued())
	}
	// A newcomer's single attempt takes the free key before the waiters.
	tokX := r.acquire("X", "0")
	if tokX <= tokA || r.holder() != "X" {
		t.Fatalf("newcomer on a free key with waiters = %d, holder %q; want a token > %d", tokX, r.holder(), tokA)
	}
	r.release("X", "0")
	// A waiter that takes the key leaves the queue.
	if tokC := r.acquire("C", "2"); tokC <= tokX || !slices.Equal(r.queued(), []string{"B"}) {
		t.Errorf("queued C on a free key = %d, queue %v; want a token > %d and [B]", tokC, r.queued(), tokX)
	}
}

// newScriptRunner runs the scripts on a key of t's own on the shared
// server, with owners waiting from the Lockers lids names, in unfair mode
// or not; the key's names are deleted when t ends.
func newScriptRunner(t *testing.T, lids map[string]string, unfair bool) scriptRunner {
	c := newClient(t, storeenv.Redis(t).Addr())
	key := uniqueKey(t)
	t.Cleanup(func() { c.Del(context.Background(), scriptKeys(key)...) })
	return scriptRunner{lids: lids, unfair: unfair, t: t, ctx: ctxFor(t, 30*time.Second), c: c, d: newDriver(c), key: key}
}

// lockerChannels subscribes to the channels of store key for the Lockers
// lids, as their notifiers would.
func lockerChannels(t *testing.T, ctx context.Context, c *goredis.Client, key string, lids ...string) map[string]*goredis.PubSub {
	t.Helper()
	subs := map[string]*goredis.PubSub{}
	for _, lid := range lids {
		ps := c.Subscribe(ctx, channelName(key)+":"+lid)
		t.Cleanup(func() { _ = ps.Close() })
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		subs[lid] = ps
	}
	return subs
}

// expectMessages checks the next message of each Locker's channel: one
// starting with want[lid], or none when that is "".
func expectMessages(t *testing.T, ctx context.Context, subs map[string]*goredis.PubSub, want map[string]string) {
	t.Helper()
	for lid, prefix := range want {
		m, err := subs[lid].ReceiveTimeout(ctx, 100*time.Millisecond)
		msg, _ := m.(*goredis.Message)
		switch {
		case prefix == "" && err == nil:
			t.Errorf("Locker %s was told %v; want nothing", lid, m)
		case prefix != "" && (msg == nil || !strings.HasPrefix(msg.Payload, prefix)):
			t.Errorf("Locker %s got %v (%v); want a message starting %q", lid, m, err, prefix)
		}
	}
}

// TestFastAndSlowPaths: the scripts' fast paths (a free key nobody waits
// for: taken without queue bookkeeping; released with nobody waiting:
// deleted) and their slow paths (queue, hand-over, barging) hand out
// fencing tokens that only go up, whichever path follows which, even with
// a fence ahead of the server's clock (a clock that stepped back); and a
// free key that has a live waiter never goes to a newcomer in fair mode,
// while in unfair mode it does.
func TestFastAndSlowPaths(t *testing.T) {
	t.Parallel()
	for _, unfair := range []bool{false, true} {
		t.Run(fmt.Sprintf("unfair=%v", unfair), func(t *testing.T) {
			r := newScriptRunner(t, nil, unfair)
			var last int64
			up := func(what string, tok int64) {
				t.Helper()
				if tok <= last {
					t.Fatalf("%s: token %d; want above the last one, %d", what, tok, last)
				}
				last = tok
			}
			up("fast acquire", r.acquire("A", "1"))
			if r.acquire("B", "1") >= 0 {
				t.Fatal("B was not queued behind A")
			}
			r.fresh()
			r.release("A", "0") // slow: B waits
			if unfair {
				if r.holder() != "" {
					t.Fatalf("unfair release left the key to %q; want it free", r.holder())
				}
				up("barging acquire", r.acquire("N", "1")) // slow: the queue exists
				if r.holder() != "N" || !slices.Equal(r.queued(), []string{"B"}) {
					t.Fatalf("unfair: holder %q, queue %v; want the newcomer N, B still queued", r.holder(), r.queued())
				}
				r.release("N", "0")
			}
			up("hand-over confirmed", r.acquire("B", "2"))
			if r.holder() != "B" || len(r.queued()) != 0 {
				t.Fatalf("holder %q, queue %v; want B, nobody queued", r.holder(), r.queued())
			}
			if n := r.release("B", "0"); n != 1 || r.holder() != "" {
				t.Fatalf("fast release = %d, holder %q; want 1 and the key free", n, r.holder())
			}
			up("fast acquire after a slow path", r.acquire("C", "1"))

			// A fence ahead of the clock: both paths go above it.
			ahead := last + int64(time.Hour/time.Microsecond)
			r.c.Set(r.ctx, fenceKey(r.key), ahead, time.Minute)
			r.release("C", "0")
			up("fast acquire, fence ahead", r.acquire("D", "1"))
			if last != ahead+1 {
				t.Errorf("fast acquire with the fence at %d = %d; want %d", ahead, last, ahead+1)
			}
			r.acquire("E", "1")
			r.release("D", "0")
			up("slow acquire, fence ahead", r.acquire("E", "2"))

			// A free key (its holder's lock expired) with a live waiter:
			// fair hands it to the waiter, whatever the newcomer's attempt.
			r.release("E", "0")
			for _, seq := range []string{"0", "1"} {
				up("holder", r.acquire("H"+seq, "1"))
				r.acquire("F", "1")
				r.c.Del(r.ctx, lockKey(r.key))
				tok := r.acquire("N"+seq, seq)
				switch {
				case unfair && tok <= 0:
					t.Errorf("unfair: newcomer's attempt (seq %s) on a free key = %d; want it taken", seq, tok)
				case unfair:
					up("newcomer in unfair mode", tok)
					r.release("N"+seq, "0")
				case tok > 0 || r.holder() != "F":
					t.Errorf("fair: newcomer's attempt (seq %s) on a free key with F waiting = %d, holder %q; want F handed the key", seq, tok, r.holder())
				default:
					up("hand-over to the waiter", r.acquire("F", "2"))
				}
				r.c.Del(r.ctx, lockKey(r.key))
				r.release("N"+seq, "1")
				r.release("F", "1")
			}
		})
	}
}

// TestUnfairWakeGap: an unfair release does not wake the first waiter again
// while an earlier release's wake-up of it is recent (the " woke" field of
// the waiters hash, until then), but does wake a new first waiter at once,
// and the same one again once the gap is over.
func TestUnfairWakeGap(t *testing.T) {
	t.Parallel()
	r := newScriptRunner(t, map[string]string{"B": "LB", "C": "LC"}, true)
	ctx, c, key := r.ctx, r.c, r.key
	subs := lockerChannels(t, ctx, c, key, "LB", "LC")
	wk := name(kindWaiters, key)
	r.acquire("A", "0")
	r.acquire("B", "1")
	r.acquire("C", "1")
	r.fresh()
	r.release("A", "0")
	expectMessages(t, ctx, subs, map[string]string{"LB": "free", "LC": ""})
	rec := strings.Fields(c.HGet(ctx, wk, " woke").Val())
	if len(rec) != 2 || rec[1] != "B" {
		t.Fatalf("after waking B: woke = %q; want <until> B", rec)
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	soon := func() { c.HSet(ctx, wk, " woke", fmt.Sprintf("%d B", now.Add(time.Hour).UnixMicro())) }
	soon() // B's wake-up is recent, whatever the time the calls took
	r.acquire("A", "0")
	r.release("A", "0")
	expectMessages(t, ctx, subs, map[string]string{"LB": "", "LC": ""})
	c.HSet(ctx, wk, " woke", "1 B") // the gap is over
	r.acquire("A", "0")
	r.release("A", "0")
	expectMessages(t, ctx, subs, map[string]string{"LB": "free", "LC": ""})
	soon()
	r.release("B", "1") // B leaves: C is first, never woken
	r.acquire("A", "0")
	r.release("A", "0")
	expectMessages(t, ctx, subs, map[string]string{"LB": "", "LC": "free"})
}

// TestUnfairWokenWaiterRetries: a waiter woken in vain (an unfair Locker
// barged in and took the key first) tries again after wakeGap by itself, so
// that a release it was not told of (within the gap) does not leave it
// asleep until its refresh (20 s with a TTL of 60 s; the test allows 5 s).
func TestUnfairWokenWaiterRetries(t *testing.T) {
	t.Parallel()
	addr := storeenv.Redis(t).Addr()
	a, b := newUnfairLocker(t, addr), newUnfairLocker(t, addr)
	key := uniqueKey(t)
	ctx := ctxFor(t, time.Minute)
	for round := range 50 {
		la, err := a.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			lb, err := b.Lock(wctx, key)
			if err == nil {
				err = lb.Unlock(ctx)
			}
			got <- err
		}()
		for !waiting(t, ctx, a, key) {
			time.Sleep(time.Millisecond)
		}
		// Release (waking B), barge in again before B's attempt, and
		// release within the wake gap: B is not told of that one.
		if err := la.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if la, err = a.TryLock(ctx, key); err == nil {
			if err := la.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: the waiter did not get the free key: %v", round, err)
		}
	}
}

// waiting reports whether a Lock waits in the queue of key.
func waiting(t *testing.T, ctx context.Context, l locker.Locker, key string) bool {
	t.Helper()
	st, err := locker.Inspect(ctx, l, key)
	if err != nil {
		t.Fatal(err)
	}
	return st.Waiters > 0
}

// lockResult is what a Lock started by lockAsync returned.
type lockResult struct {
	lk  locker.Lock
	err error
}

// lockAsync calls l.Lock(ctx, key) in a goroutine; the channel, buffered,
// receives its result.
func lockAsync(ctx context.Context, l locker.Locker, key string) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		lk, err := l.Lock(ctx, key)
		ch <- lockResult{lk, err}
	}()
	return ch
}
