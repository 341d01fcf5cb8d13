package redis_test

import (
	"context"
	"errors"
	"maps"
	"net/url"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestCancelledReadsReturnDuringOutage: Inspect, List and Extend whose ctx
// is cancelled (no deadline) return while the store does not answer, on a
// Locker of the caller's client with no read timeout (go-redis honours no
// cancel mid-command) and on one that owns its client (redis.Open), whose
// renewals use its pool. Without the engine's detaching, each waits until
// the store answers again.
func TestCancelledReadsReturnDuringOutage(t *testing.T) {
	srv := testenv.NewRedis(t)
	lockers := map[string]func(t *testing.T, addr string) locker.Locker{
		"New": func(t *testing.T, addr string) locker.Locker {
			o := clientOptions(addr)
			o.ReadTimeout, o.ContextTimeoutEnabled = -1, false // no read deadline at all
			c := goredis.NewClient(o)
			t.Cleanup(func() { _ = c.Close() })
			l, err := redis.New(c, locker.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		"Open": func(t *testing.T, addr string) locker.Locker {
			u := &url.URL{Scheme: "redis", Host: addr, RawQuery: "read_timeout=-1&protocol=3"}
			l, err := redis.Open(t.Context(), u, locker.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	}
	for name, mk := range lockers {
		t.Run(name, func(t *testing.T) {
			p := testenv.NewProxy(t, srv.Addr())
			l := mk(t, p.Addr())
			defer l.Close()
			ctx := t.Context()
			key := "cancel-outage-" + name
			lk, err := l.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]func(ctx context.Context) error{
				"Inspect": func(ctx context.Context) error { _, err := locker.Inspect(ctx, l, key); return err },
				"List": func(ctx context.Context) error {
					for _, err := range locker.List(ctx, l, key) {
						if err != nil {
							return err
						}
					}
					return nil
				},
				"Extend": func(ctx context.Context) error { return locker.Extend(ctx, lk) },
			}
			p.Cut()
			type result struct {
				call string
				err  error
			}
			cctx, cancel := context.WithCancel(ctx)
			results := make(chan result, len(calls))
			for call, f := range calls {
				go func() { results <- result{call, f(cctx)} }()
			}
			time.Sleep(200 * time.Millisecond) // the calls wait for their replies
			cancel()
			pending := maps.Clone(calls)
			deadline := time.After(10 * time.Second)
			for len(pending) > 0 {
				select {
				case r := <-results:
					delete(pending, r.call)
					if !errors.Is(r.err, context.Canceled) {
						t.Errorf("%s cancelled during an outage: %v; want an error matching context.Canceled", r.call, r.err)
					}
				case <-deadline:
					t.Fatalf("%v cancelled during an outage did not return within 10 s: every call must return promptly when its ctx ends", slices.Sorted(maps.Keys(pending)))
				}
			}
			p.Heal()
			if err := lk.Unlock(ctx); err != nil {
				t.Errorf("Unlock after the heal: %v", err)
			}
		})
	}
}
