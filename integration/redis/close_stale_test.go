package redis_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestCloseSkipsAStaleWaitersLeave: Close of a Locker cut off from Redis
// while a Lock waits tries the waiter's leave only until Redis counts the
// waiter as gone (three refresh intervals after its last answered attempt,
// plus a hand-over's claim), not for its release timeout: each try waits
// for the client's read timeout, here 10 s.
func TestCloseSkipsAStaleWaitersLeave(t *testing.T) {
	const ttl = time.Second
	srv := testenv.NewRedis(t)
	p := testenv.NewProxy(t, srv.Addr())
	holder, err := redis.New(newClient(t, srv.Addr()), locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	o := clientOptions(p.Addr())
	o.ReadTimeout = 10 * time.Second
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	scripts := watchScripts(c)
	// NoInbox: the inbox reader's BLPOP has a bound of its own.
	waiter, err := redis.Config{NoInbox: true}.New(c, locker.WithTTL(ttl), locker.WithReleaseTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waited := waitingLock(t, holder, waiter, "close-stale-leave", nil)
	// A bound, not a measurement: the waiter is stale 1.5 s after its
	// last answered attempt; one try of its leave takes 10 s.
	closeCutOff(t, waiter, p, scripts, 8*time.Second, "it must not try the waiter's leave past the time Redis counts the waiter as gone")
	if err := <-waited; !errors.Is(err, locker.ErrClosed) {
		t.Errorf("the waiting Lock ended by Close = %v; want ErrClosed", err)
	}
}

// waitingLock takes key with holder, starts a Lock of it on waiter, and
// returns the Lock's result once it waits: once the waiter's inbox reader
// runs BLPOP, as admin sees, or, when admin is nil, once Inspect through
// holder counts a waiter on key. holder unlocks when the test ends.
func waitingLock(t *testing.T, holder, waiter locker.Locker, key string, admin *goredis.Client) <-chan error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	lk, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Unlock(context.WithoutCancel(ctx)) })
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, key)
		waited <- err
	}()
	if admin == nil {
		// The Lock's first attempt was answered once the store counts
		// it as a waiter: a fixed pause was too short once under load.
		for {
			st, err := locker.Inspect(ctx, holder, key)
			if err == nil && st.Waiters > 0 {
				return waited
			}
			if ctx.Err() != nil {
				t.Fatalf("the waiting Lock never queued: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for !strings.Contains(admin.ClientList(ctx).Val(), "cmd=blpop") {
		if ctx.Err() != nil {
			t.Fatal("the waiting Locker's inbox reader never ran BLPOP")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return waited
}

// closeCutOff cuts p, under l, and closes l; it fails, saying must, when
// Close has not returned within bound (it heals p then, so that Close
// ends). With scripts (the watch of l's client when l cannot cut its
// calls), it cuts p only between two attempts (see scriptWatch.cut).
func closeCutOff(t *testing.T, l locker.Locker, p *testenv.Proxy, scripts *scriptWatch, bound time.Duration, must string) {
	t.Helper()
	if scripts != nil {
		scripts.cut(t, p)
	} else {
		p.Cut()
	}
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
		t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(bound):
		p.Heal()
		<-closed
		t.Fatalf("Close of a cut-off Locker whose Lock waited took more than %v: %s", bound, must)
	}
}

// TestCloseSkipsACutAttemptsLateCleanup: Close of an Open Locker cut off
// from Redis, after a TryLock it cut when its ctx ended, tries that
// attempt's cleanup (its tombstone, then its leave) only until what the
// attempt's request could leave lapses by itself (a TTL or a stale time,
// plus a claim), not for its release timeout. The cleanup ran into the
// test below's bound whenever Close came while a waiting Lock's refresh
// was on the wire.
func TestCloseSkipsACutAttemptsLateCleanup(t *testing.T) {
	const ttl = time.Second
	srv := testenv.NewRedis(t)
	p := testenv.NewProxy(t, srv.Addr())
	u := &url.URL{Scheme: "redis", Host: p.Addr(), RawQuery: "read_timeout=1s"}
	l, err := redis.Open(t.Context(), u, locker.WithTTL(ttl), locker.WithReleaseTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	p.Cut()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := l.TryLock(ctx, "close-cut-attempt"); err == nil {
		t.Fatal("TryLock through a cut proxy took the lock")
	}
	// A bound, not a measurement: what the cut request could leave lapses
	// 1.5 s after it was cut; the release timeout is a minute.
	closeCutOff(t, l, p, nil, 8*time.Second, "it must not try a cut attempt's cleanup past the time what it could leave lapses")
}

// scriptWatch follows the scripts a client runs: how many are on the wire,
// and when the last one ended.
type scriptWatch struct {
	mu      sync.Mutex
	running int
	ended   time.Time
}

// watchScripts returns the watch of c's scripts.
func watchScripts(c *goredis.Client) *scriptWatch {
	w := &scriptWatch{}
	c.AddHook(w)
	return w
}

// scriptQuiet is how long no script of a waiting Lock's may have run
// before scriptWatch.cut cuts: longer than a wake-up's attempt takes to
// follow its cause (the subscription's confirmation), shorter than the
// least pause before a refresh (half of a 1 s TTL's third).
const scriptQuiet = 50 * time.Millisecond

// cut cuts p once no script has run for scriptQuiet, holding back scripts
// meanwhile, so that none is on the wire at the cut. Close of a Locker on
// a client it does not own waits for its calls in progress (go-redis
// ends one cut off only at its read timeout): a refresh on the wire at
// the cut would make a test of what Close does after the cut measure that
// instead. Scripts sent after the cut (the waiter's leave) are cut off.
func (w *scriptWatch) cut(t *testing.T, p *testenv.Proxy) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		if w.running == 0 && time.Since(w.ended) >= scriptQuiet {
			p.Cut()
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		if time.Now().After(end) {
			t.Fatal("the waiting Lock's scripts never paused for " + scriptQuiet.String())
		}
	}
}

func (w *scriptWatch) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (w *scriptWatch) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if !isScript(cmd) {
			return next(ctx, cmd)
		}
		w.start()
		defer w.end()
		return next(ctx, cmd)
	}
}

func (w *scriptWatch) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		w.start()
		defer w.end()
		return next(ctx, cmds)
	}
}

func (w *scriptWatch) start() {
	w.mu.Lock()
	w.running++
	w.mu.Unlock()
}

func (w *scriptWatch) end() {
	w.mu.Lock()
	w.running--
	w.ended = time.Now()
	w.mu.Unlock()
}

// isScript reports whether cmd runs a script (EVALSHA, or EVAL when the
// script cache lost it).
func isScript(cmd goredis.Cmder) bool {
	name := cmd.Name()
	return strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall")
}

var _ goredis.Hook = (*scriptWatch)(nil)
