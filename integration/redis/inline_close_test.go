package redis_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestCloseWhileInlineCallBlocks: a call whose ctx never ends runs its
// store call inline, in the caller's goroutine; when the store is cut off,
// Close still returns within its release timeout plus one read timeout, and
// so does the call, with an error. The client retries a timed-out command
// a hundred times: a store call that Close did not cancel would take more
// than a hundred read timeouts.
//
// On a Locker that owns its client (redis.Open), such calls run on a pool
// that Close cuts at once: the client's read timeout is a minute, retried
// ten times.
//
// The test's bound (inlineHang) only tells such a hang from a Close that
// returns: it is no timing check (docs/design.md, "Tests on a loaded
// machine").
func TestCloseWhileInlineCallBlocks(t *testing.T) {
	srv := testenv.NewRedis(t)
	for _, owned := range []bool{false, true} {
		for _, op := range []string{"Lock", "TryLock", "Unlock"} {
			name := op
			if owned {
				name = "Open/" + op
			}
			t.Run(name, func(t *testing.T) { closeWhileInlineCallBlocks(t, srv.Addr(), op, owned) })
		}
	}
}

// closeWhileInlineCallBlocks is TestCloseWhileInlineCallBlocks for op, on a
// Locker of the server at addr that owns its client when owned is set.
func closeWhileInlineCallBlocks(t *testing.T, addr, op string, owned bool) {
	p := testenv.NewProxy(t, addr)
	var l locker.Locker
	var err error
	if owned {
		u := &url.URL{Scheme: "redis", Host: p.Addr(), RawQuery: "read_timeout=1m&max_retries=10"}
		l, err = redis.Open(t.Context(), u, locker.WithTTL(10*time.Second), locker.WithReleaseTimeout(time.Second))
	} else {
		opts := clientOptions(p.Addr())
		opts.MaxRetries = 100
		c := goredis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		l, err = redis.Config{}.New(c, locker.WithTTL(10*time.Second), locker.WithReleaseTimeout(time.Second))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background() // Done is nil: the store calls run inline
	key := "inline-close-" + t.Name()
	var held locker.Lock
	if op == "Unlock" {
		if held, err = l.TryLock(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	p.Cut()
	returned := make(chan error, 1)
	go func() {
		var err error
		switch op {
		case "Lock":
			_, err = l.Lock(ctx, key)
		case "TryLock":
			_, err = l.TryLock(ctx, key)
		default:
			err = held.Unlock(ctx)
		}
		returned <- err
	}()
	time.Sleep(200 * time.Millisecond) // the call waits for its reply
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		_ = l.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(inlineHang):
		t.Fatalf("Close of a cut-off Locker whose %s(context.Background()) waits for the store still running after %v; want it to end the call, within its release timeout (1 s) plus a read timeout (1 s)", op, inlineHang)
	}
	t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	select {
	case err := <-returned:
		if err == nil {
			t.Errorf("%s on a cut-off Locker that closed meanwhile returned no error", op)
		}
	case <-time.After(inlineHang):
		t.Fatalf("%s(context.Background()) on a cut-off Locker did not return within %v after Close returned", op, inlineHang)
	}
}

// inlineHang bounds TestCloseWhileInlineCallBlocks's waits for Close and
// the call: a Close that does not end the call waits out its retries, over
// 100 s (or ten minutes on its own client), and a Close that does returns
// within its release timeout plus a read timeout, 2 s, or later on a
// loaded machine.
const inlineHang = 30 * time.Second
