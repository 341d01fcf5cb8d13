package redis_test

import (
	"context"
	"net/url"
	"strings"
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
	waiter, err := redis.Config{}.New(newClient(t, p.Addr()), locker.WithTTL(3*time.Second), locker.WithReleaseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lk, err := holder.TryLock(ctx, "inbox-close")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(context.WithoutCancel(ctx))
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, "inbox-close")
		waited <- err
	}()
	// The waiting Lock starts the Locker's inbox reader.
	for !strings.Contains(admin.ClientList(ctx).Val(), "cmd=blpop") {
		if ctx.Err() != nil {
			t.Fatal("the waiting Locker's inbox reader never ran BLPOP")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Cut()
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
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lk, err := holder.TryLock(ctx, "inbox-cut")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(context.WithoutCancel(ctx))
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, "inbox-cut")
		waited <- err
	}()
	for !strings.Contains(admin.ClientList(ctx).Val(), "cmd=blpop") {
		if ctx.Err() != nil {
			t.Fatal("the waiting Locker's inbox reader never ran BLPOP")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Cut()
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- waiter.Close() }()
	// A bound, not a measurement: the waiter's leave is skipped 1.5 s
	// after its last answered attempt; the BLPOP would block 12 s.
	const bound = 8 * time.Second
	select {
	case <-closed:
		t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(bound):
		p.Heal()
		<-closed
		t.Fatalf("Close of a cut-off Open Locker whose Lock waited on its inbox took more than %v: it must cut the inbox's BLPOP", bound)
	}
	if err := <-waited; err == nil {
		t.Errorf("the waiting Lock returned the lock from a closed, cut-off Locker")
	}
}
