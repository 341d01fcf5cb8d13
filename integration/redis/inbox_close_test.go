package redis_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestCloseWhileInboxReads: Close of a Locker cut off from Redis while a
// Lock waits on its inbox returns within its release timeout plus one read
// timeout. It used to wait for the inbox reader's BLPOP, which go-redis
// bounds only at the command's timeout plus 10 s.
func TestCloseWhileInboxReads(t *testing.T) {
	srv := testenv.NewRedis(t)
	admin := newClient(t, srv.Addr())
	p := testenv.NewProxy(t, srv.Addr())
	holder, err := redis.Config{}.New(newClient(t, srv.Addr()), locker.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	c := newClient(t, p.Addr())
	scripts := watchScripts(c)
	waiter, err := redis.Config{}.New(c, locker.WithTTL(3*time.Second), locker.WithReleaseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waited := waitingLock(t, holder, waiter, "inbox-close", admin)
	scripts.cut(t, p)
	start := time.Now()
	_ = waiter.Close()
	// The bound is generous: release timeout 1 s, read timeout 1 s.
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("Close of a cut-off Locker whose Lock waited on its inbox took %v; want its release timeout (1 s) plus a read timeout (1 s)", took.Round(time.Millisecond))
	}
	if err := <-waited; err == nil {
		t.Errorf("the waiting Lock returned the lock from a closed, cut-off Locker")
	}
}

// TestCloseCutsTheInboxRead: Close of a Locker that owns its client
// (redis.Open), cut off from Redis while a Lock waits on its inbox, cuts
// the inbox reader's BLPOP instead of waiting for it: go-redis bounds a
// BLPOP that gets no answer only at its timeout plus 10 s.
func TestCloseCutsTheInboxRead(t *testing.T) {
	srv := testenv.NewRedis(t)
	admin := newClient(t, srv.Addr())
	p := testenv.NewProxy(t, srv.Addr())
	holder, err := redis.New(newClient(t, srv.Addr()), locker.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	u := &url.URL{Scheme: "redis", Host: p.Addr(), RawQuery: "read_timeout=1s&protocol=3"}
	waiter, err := redis.Open(t.Context(), u, locker.WithTTL(time.Second), locker.WithReleaseTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waited := waitingLock(t, holder, waiter, "inbox-cut", admin)
	// A bound, not a measurement: the waiter's leave is skipped 1.5 s
	// after its last answered attempt; the BLPOP would block 12 s.
	closeCutOff(t, waiter, p, nil, 8*time.Second, "it must cut the inbox's BLPOP")
	if err := <-waited; err == nil {
		t.Errorf("the waiting Lock returned the lock from a closed, cut-off Locker")
	}
}

// TestCloseBoundsACallersInboxRead: Close of a Locker on a client of the
// caller's (ContextTimeoutEnabled), cut off from Redis while a Lock waits
// on its inbox, waits for the reader's BLPOP only until the BLPOP's own
// deadline, a second past its timeout, and for its wake-up marker a
// second at most. go-redis cannot cut a blocked read on a client it does
// not own: it bounded that BLPOP only at its timeout plus 10 s, and the
// marker's push by the release timeout (1 min here).
func TestCloseBoundsACallersInboxRead(t *testing.T) {
	const ttl = time.Second
	srv := testenv.NewRedis(t)
	admin := newClient(t, srv.Addr())
	p := testenv.NewProxy(t, srv.Addr())
	holder, err := redis.New(newClient(t, srv.Addr()), locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	c := newClient(t, p.Addr())
	scripts := watchScripts(c)
	waiter, err := redis.New(c, locker.WithTTL(ttl), locker.WithReleaseTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waited := waitingLock(t, holder, waiter, "inbox-callers", admin)
	// A bound, not a measurement: the waiter's leave is skipped 1.5 s
	// after its last answered attempt, the BLPOP ends 3 s after it was
	// sent, the marker's push after 1 s; Close took 9-12 s without those
	// deadlines.
	closeCutOff(t, waiter, p, scripts, 6*time.Second, "it must wait for the inbox's BLPOP only until the BLPOP's deadline")
	if err := <-waited; err == nil {
		t.Errorf("the waiting Lock returned the lock from a closed, cut-off Locker")
	}
}
