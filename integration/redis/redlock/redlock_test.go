package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/backends"
	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/integration/internal/redistest"
	"github.com/golocker/locker/integration/internal/slowlink"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// redlockTTL is the TTL of the Redlock harnesses: longer than testTTL, as
// every attempt runs a script on each of 3 or 5 servers sharing the
// machine's cores with the suite's parallel cases.
const redlockTTL = 3 * time.Second

// redlockHarness is the conformance harness on independent masters: every
// Locker has its own client of each master, whose connections are on a
// link of its own (which Slow slows) to a proxy of its own (which Isolate
// cuts). Restart restarts every master at once (empty datasets) and waits
// out their restart delay; Failover restarts a majority of them one after
// the other, as a rolling upgrade would, and lets the case meet the delay.
func redlockHarness(t *testing.T, masters []*testenv.RedisServer) conformance.Harness {
	testenv.AwaitRedisUptime(t, masters, redlockTTL)
	admins := make([]*goredis.Client, len(masters))
	for i, m := range masters {
		admins[i] = newClient(t, m.Addr())
	}
	var reps redistest.Replicas
	var (
		mu      sync.Mutex
		clients = map[locker.Locker][]*goredis.Client{} // each Locker's, by master
	)
	return conformance.Harness{
		TTL: redlockTTL,
		NewLocker: func(t testing.TB) locker.Locker {
			cs := make([]redis.Master, len(masters))
			var closers multiCloser
			var mine []*goredis.Client
			var proxies []*testenv.Proxy
			var links []*slowlink.Link
			for i, m := range masters {
				// client, on its link (Slow) → its proxy (Isolate) → master
				p := testenv.NewProxy(t, m.Addr())
				s := new(slowlink.Link)
				o := clientOptions(p.Addr())
				o.Dialer = s.Dial(p.Addr())
				c := goredis.NewClient(o)
				t.Cleanup(func() { _ = c.Close() })
				cs[i], closers, mine = c, append(closers, c), append(mine, c)
				proxies, links = append(proxies, p), append(links, s)
			}
			l, err := redis.NewRedlock(cs, locker.WithTTL(redlockTTL))
			if err != nil {
				t.Errorf("NewRedlock: %v", err)
				return nil
			}
			reps.Add(l, redistest.Replica{Client: closers, Proxies: proxies, Links: links})
			mu.Lock()
			clients[l] = mine
			mu.Unlock()
			return l
		},
		NewLockerWith: func(t testing.TB, opts ...locker.Option) (locker.Locker, error) {
			cs := make([]redis.Master, len(masters))
			for i, m := range masters {
				cs[i] = newClient(t, m.Addr())
			}
			return redis.NewRedlock(cs, append([]locker.Option{locker.WithTTL(redlockTTL)}, opts...)...)
		},
		Crash:   reps.Crash,
		Isolate: reps.Isolate,
		Nodes:   len(masters),
		Slow:    reps.Slow,
		DeleteBehind: func(t testing.TB, key string) {
			for i, a := range admins {
				if err := a.Del(context.Background(), redis.KeysOf(key).Lock).Err(); err != nil {
					t.Errorf("master %d: DEL %s: %v", i, redis.KeysOf(key).Lock, err)
				}
			}
		},
		Restart: func(t testing.TB) {
			testenv.RestartRedisMasters(t, masters)
			testenv.AwaitRedisUptime(t, masters, redlockTTL)
		},
		Failover: func(t testing.TB) {
			// Without the restart delay, the restarted masters would
			// form a quorum for keys whose locks they forgot while
			// the others still hold them.
			for _, m := range masters[:len(masters)/2+1] {
				m.Restart(t)
			}
		},
		// Every master's client of the Locker, each ended by that
		// master's admin client.
		Busy: func(t testing.TB, l locker.Locker) func() {
			mu.Lock()
			mine := clients[l]
			mu.Unlock()
			var releases []func()
			for i, c := range mine {
				releases = append(releases, redistest.Busy(t, c, admins[i]))
			}
			// The caller's work ends on every master at once: ended
			// one master after another, the last masters' clients
			// stayed busy for the others' release times as well, and
			// at load the attempt's validity ran out before they
			// answered (CI: "2 of 5 masters answered").
			return func() {
				var wg sync.WaitGroup
				for _, r := range releases {
					wg.Go(r)
				}
				wg.Wait()
			}
		},
		MaxKeyBytes: redis.MaxKeyBytes,
	}
}

// multiCloser closes several clients as one (Crash).
type multiCloser []closer

func (m multiCloser) Close() error {
	for _, c := range m {
		_ = c.Close()
	}
	return nil
}

func TestConformanceRedlock3(t *testing.T) {
	conformance.Run(t, redlockHarness(t, testenv.NewRedisMasters(t, 3)))
}

func TestConformanceRedlock5(t *testing.T) {
	conformance.Run(t, redlockHarness(t, testenv.NewRedisMasters(t, 5)))
}

// TestOpenRedlock opens a Redlock by URL on three masters, registered as
// the backends module registers it: the Locker locks, and a master down
// does not stop it.
func TestOpenRedlock(t *testing.T) {
	t.Parallel()
	masters := testenv.NewRedisMasters(t, 3)
	testenv.AwaitRedisUptime(t, masters, 2*time.Second) // the URL's TTL: the masters' restart delay
	var mux locker.Mux
	if err := backends.Register(&mux); err != nil {
		t.Fatal(err)
	}
	raw := "redlock://" + masters[0].Addr() + "," + masters[1].Addr() + "," + masters[2].Addr() + "?ttl=2s&prefix=url:&restart_delay=2s&fence_retention=1h&master_timeout=1s"
	l, err := locker.Open(t.Context(), &mux, raw)
	if err != nil {
		t.Fatalf("Open(%s): %v", raw, err)
	}
	defer l.Close()
	masters[2].Kill(t)
	lk, err := l.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatalf("TryLock with one of three masters down: %v", err)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}
