package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// pubSubRefusals are ACL rules under which a server refuses a user pub/sub:
// by command category, and by channel.
var pubSubRefusals = []struct {
	name  string
	rules []any
}{
	{"-@pubsub", []any{"allchannels", "-@pubsub"}},
	{"resetchannels", []any{"resetchannels"}},
}

// noPubSubClient returns a client of addr, closed when the test ends, that
// logs in as a user of its own (deleted when the test ends) with every key
// and command allowed, then the ACL rules.
func noPubSubClient(t testing.TB, addr string, rules ...any) *goredis.Client {
	t.Helper()
	admin := newClient(t, addr)
	ctx := ctxFor(t, 10*time.Second)
	user, pass := fmt.Sprintf("nopubsub-%d", time.Now().UnixNano()), "secret"
	args := append([]any{"ACL", "SETUSER", user, "reset", "on", ">" + pass, "~*", "+@all"}, rules...)
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { _ = admin.Do(ctx, "ACL", "DELUSER", user).Err() })
	o := clientOptions(addr)
	o.Username, o.Password = user, pass
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// BenchmarkHandoffNoPubSub is BenchmarkHandoff on a server that refuses
// pub/sub to the Lockers' user (ACL -@pubsub), at the default TTL and
// backoff: the waiter polls. Target: p50 <= 2 * locker.DefaultBackoffMin.
func BenchmarkHandoffNoPubSub(b *testing.B) {
	srv := benchServer(b)
	holder, _ := newTestLocker(b, noPubSubClient(b, srv.Addr(), pubSubRefusals[0].rules...))
	waiter, _ := newTestLocker(b, noPubSubClient(b, srv.Addr(), pubSubRefusals[0].rules...))
	benchHandoff(b, newClient(b, srv.Addr()), holder, waiter)
}

// switchLog counts the INFO records of a Locker switching to polling.
type switchLog struct {
	slog.Handler
	n *atomic.Int64
}

func (h switchLog) Enabled(context.Context, slog.Level) bool { return true }

func (h switchLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && strings.Contains(r.Message, "refuses pub/sub") {
		h.n.Add(1)
	}
	return nil
}

func (h switchLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h switchLog) WithGroup(string) slog.Handler      { return h }

// TestNoPubSub: on a server that refuses pub/sub to the Lockers' user, or
// with Config.NoPubSub, hand-offs by Unlock, Do and TryLock return no error
// (the hand-over was written), the waiters get the key by polling, in queue
// order, and an auto-detected switch is logged once at INFO. The hand-off
// latency is logged (BenchmarkHandoffNoPubSub measures it).
func TestNoPubSub(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	type setup struct {
		name   string
		client func(t *testing.T) *goredis.Client
		cfg    Config
	}
	var setups []setup
	for _, r := range pubSubRefusals {
		setups = append(setups, setup{name: r.name, client: func(t *testing.T) *goredis.Client {
			return noPubSubClient(t, srv.Addr(), r.rules...)
		}})
	}
	setups = append(setups, setup{name: "forced", cfg: Config{NoPubSub: true},
		client: func(t *testing.T) *goredis.Client { return newClient(t, srv.Addr()) }})
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t, 60*time.Second)
			admin := newClient(t, srv.Addr())
			var switches atomic.Int64
			mk := func() locker.Locker {
				l, err := s.cfg.New(s.client(t), locker.WithTTL(3*time.Second),
					locker.WithLogger(slog.New(switchLog{n: &switches})))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			key := uniqueKey(t)
			holder, w1, w2, other := mk(), mk(), mk(), mk()
			type lockResult struct {
				lk  locker.Lock
				err error
			}
			lockAsync := func(l locker.Locker) <-chan lockResult {
				res := make(chan lockResult, 1)
				go func() { lk, err := l.Lock(ctx, key); res <- lockResult{lk, err} }()
				return res
			}
			var lats []time.Duration
			for round := range 4 {
				lk, err := holder.Lock(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				first, second := lockAsync(w1), (<-chan lockResult)(nil)
				waitQueued(t, ctx, admin, key, 1)
				second = lockAsync(w2)
				waitQueued(t, ctx, admin, key, 2)
				if _, err := other.TryLock(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
					t.Fatalf("round %d: TryLock of a held key: got %v, want ErrNotAcquired", round, err)
				}
				start := time.Now()
				switch round % 2 {
				case 0:
					if err := lk.Unlock(ctx); err != nil {
						t.Fatalf("round %d: Unlock that handed the key over: %v", round, err)
					}
				case 1:
					// The holder's lock expires behind it: a TryLock
					// finds the key free and hands it to the first
					// waiter.
					if err := admin.Del(ctx, lockKey(key)).Err(); err != nil {
						t.Fatal(err)
					}
					if _, err := other.TryLock(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
						t.Fatalf("round %d: TryLock that handed the key over: got %v, want ErrNotAcquired", round, err)
					}
					_ = lk.Unlock(ctx)
				}
				r := <-first
				if r.err != nil {
					t.Fatalf("round %d: the first waiter: %v", round, r.err)
				}
				lats = append(lats, time.Since(start))
				if err := r.lk.Unlock(ctx); err != nil {
					t.Fatalf("round %d: the first waiter's Unlock that handed the key over: %v", round, err)
				}
				r = <-second
				if r.err != nil {
					t.Fatalf("round %d: the second waiter (queue order): %v", round, r.err)
				}
				if err := r.lk.Unlock(ctx); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
			// Do that hands over.
			var res <-chan lockResult
			err := locker.Do(ctx, w1, key, func(context.Context) error {
				res = lockAsync(w2)
				waitQueued(t, ctx, admin, key, 1)
				return nil
			})
			if err != nil {
				t.Fatalf("Do that handed the key over: %v", err)
			}
			r := <-res
			if r.err != nil {
				t.Fatal(r.err)
			}
			_ = r.lk.Unlock(ctx)
			want := int64(4) // once per Locker
			if s.cfg.NoPubSub {
				want = 0
			}
			if got := switches.Load(); got > want {
				t.Errorf("%d INFO records of the switch to polling, want at most one per Locker (%d)", got, want)
			}
			if !s.cfg.NoPubSub && switches.Load() == 0 {
				t.Errorf("no INFO record of the switch to polling")
			}
			t.Logf("hand-off latency by polling (Unlock or TryLock to the waiter's return): %v", lats)
		})
	}
}
