package sentinel_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/backends"
	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/integration/internal/redistest"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// failoverClient returns a go-redis failover client of srv's primary,
// closed when the test ends.
func failoverClient(t testing.TB, srv *testenv.RedisSentinelServer) *goredis.Client {
	return failoverClientVia(t, srv, nil)
}

// failoverClientVia is failoverClient with every connection, to the
// sentinels and to the data nodes, made by dial (nil: directly).
func failoverClientVia(t testing.TB, srv *testenv.RedisSentinelServer, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *goredis.Client {
	c := goredis.NewFailoverClient(&goredis.FailoverOptions{
		Dialer:                dial,
		MasterName:            testenv.SentinelMaster,
		SentinelAddrs:         srv.SentinelAddrs(),
		ContextTimeoutEnabled: true,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		DialTimeout:           time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestOpenSentinel opens a Locker by URL through the sentinels (the route
// backends.Register takes for master_name), whose client speaks to the
// primary the RESP version of parameter protocol, and checks the URL's
// errors: a missing master name, a bad protocol, and no sentinel password
// in any error.
func TestOpenSentinel(t *testing.T) {
	srv := testenv.NewRedisSentinel(t)
	var mux locker.Mux
	if err := backends.Register(&mux); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	hosts := strings.Join(srv.SentinelAddrs(), ",")
	l, err := locker.Open(ctx, &mux, "redis://"+hosts+"/0?master_name="+testenv.SentinelMaster+"&ttl=2s&prefix=sentinel/&replicas=1&client_name=sentinel-open&protocol=2")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	primary := goredis.NewClient(&goredis.Options{Addr: srv.DataAddrs()[0]})
	defer primary.Close()
	list, err := primary.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for line := range strings.Lines(list) {
		if fs := strings.Fields(line); slices.Contains(fs, "name=sentinel-open") {
			named++
			if !slices.Contains(fs, "resp=2") {
				t.Errorf("with protocol=2, the client of OpenSentinel must speak RESP2 to the primary: %s", line)
			}
		}
	}
	if named == 0 {
		t.Errorf("no connection named sentinel-open on the primary:\n%s", list)
	}
	lk, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	st, err := locker.Inspect(ctx, l, "k")
	if err != nil || !st.Held || st.Token != lk.Token() {
		t.Errorf("Inspect through the sentinels: %+v, %v; want the lock held with token %d", st, err, lk.Token())
	}
	// The lock is on the primary, under the prefix.
	if n, err := primary.Exists(ctx, redis.KeysOf("sentinel/k").Lock).Result(); err != nil || n != 1 {
		t.Errorf("the lock is not on the primary: EXISTS = %d, %v", n, err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	const secret = "Hunter2Secret"
	for _, c := range []struct{ url, says string }{
		{"redis://" + hosts + "/0?sentinel_password=" + secret, ""}, // a Cluster URL to the mux
		{"redis://" + hosts + "/0?master_name=&sentinel_password=" + secret, "master_name"},
		{"redis://" + hosts + "/0?master_name=m&sentinel_password=" + secret + "&bogus=1", "bogus"},
		{"redis://" + hosts + "/0?master_name=m&sentinel_password=" + secret + "&protocol=4", "parameter protocol="},
		{"redis://0.0.0.0:1/0?master_name=m&sentinel_password=" + secret, "cleartext"},
		{"redis://0.0.0.0:1/0?master_name=m&sentinel_password=" + secret + "&insecure=true&dial_timeout=100ms", ""},
	} {
		octx, cancel := context.WithTimeout(ctx, 3*time.Second)
		for _, open := range []func() (locker.Locker, error){
			func() (locker.Locker, error) { return locker.Open(octx, &mux, c.url) },
			func() (locker.Locker, error) { return redis.OpenSentinel(octx, mustParse(t, c.url)) },
		} {
			l, err := open()
			if err == nil {
				_ = l.Close()
				t.Errorf("%s: opened", c.url)
				continue
			}
			msg := err.Error()
			if strings.Contains(msg, "Hunter2") || strings.Contains(msg, "Secret") {
				t.Errorf("%s: the error shows the sentinel password: %s", c.url, msg)
			}
			if !strings.Contains(msg, c.says) {
				t.Errorf("%s: the error must say %q: %s", c.url, c.says, msg)
			}
		}
		cancel()
	}
}

// TestSentinelFailover takes 200 locks, one after the other, on a primary
// that a graceful SENTINEL FAILOVER replaces while they are taken, and
// has a second Locker try every key all along: with Config.Replicas 1 it
// must never get a key whose first holder's Done is still open (every
// lock granted reached the replica that takes over), and its tokens must
// exceed the first holder's. Without it, the overlaps (locks the failover
// lost while their holders still held them) are logged, not asserted.
func TestSentinelFailover(t *testing.T) {
	for _, c := range []struct {
		name     string
		replicas int
	}{{"Replicas1", 1}, {"NoReplicas", 0}} {
		t.Run(c.name, func(t *testing.T) {
			srv := testenv.NewRedisSentinel(t)
			r := failoverRun(t, srv, c.replicas)
			t.Logf("replicas=%d: %d locks taken (%d refused or failed attempts while failing over), failover took %v; "+
				"the rival got %d keys, %d of them while their first holder's Done was open (overlap %v), %d with a token not above the first holder's; %d first holders lost their lock",
				c.replicas, r.taken, r.failedAttempts, r.failover.Round(time.Millisecond), r.rivalGot, r.overlaps, r.overlapTimes, r.tokenErrs, r.lost)
			if c.replicas > 0 {
				if r.overlaps > 0 {
					t.Errorf("with Config.Replicas 1, a key must never be granted to two holders at once across a failover: %d overlaps", r.overlaps)
				}
				if r.tokenErrs > 0 {
					t.Errorf("fencing tokens must increase across a failover: %d keys went to the rival with a token not above the first holder's", r.tokenErrs)
				}
			}
		})
	}
}

// failoverResult is what failoverRun saw.
type failoverResult struct {
	taken, failedAttempts int
	failover              time.Duration
	rivalGot, overlaps    int
	overlapTimes          []time.Duration // from the rival's grant to the first holder's Done
	tokenErrs, lost       int
}

// failoverRun is one run of TestSentinelFailover.
func failoverRun(t *testing.T, srv *testenv.RedisSentinelServer, replicas int) failoverResult {
	const (
		locks      = 200
		failoverAt = 50
		ttl        = 3 * time.Second
	)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	newLocker := func() locker.Locker {
		l, err := redis.Config{Replicas: replicas}.New(failoverClient(t, srv), locker.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	holder, rival := newLocker(), newLocker()

	type held struct {
		key string
		lk  locker.Lock
	}
	var (
		mu     sync.Mutex
		helds  []held
		res    failoverResult
		stop   = make(chan struct{})
		rivalW sync.WaitGroup
	)
	// The rival tries every key taken so far, again and again.
	rivalW.Add(1)
	go func() {
		defer rivalW.Done()
		got := map[string]bool{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			mu.Lock()
			snapshot := append([]held(nil), helds...)
			mu.Unlock()
			for _, h := range snapshot {
				if got[h.key] {
					continue
				}
				lk, err := rival.TryLock(ctx, h.key)
				if err != nil {
					continue
				}
				got[h.key] = true
				mu.Lock()
				res.rivalGot++
				select {
				case <-h.lk.Done():
				default:
					res.overlaps++
					start := time.Now()
					go func() {
						select {
						case <-h.lk.Done():
							mu.Lock()
							res.overlapTimes = append(res.overlapTimes, time.Since(start).Round(time.Millisecond))
							mu.Unlock()
						case <-ctx.Done():
						}
					}()
				}
				if lk.Token() <= h.lk.Token() {
					res.tokenErrs++
				}
				mu.Unlock()
			}
		}
	}()

	failedOver := make(chan struct{})
	for i := range locks {
		if i == failoverAt {
			go func() {
				defer close(failedOver)
				start := time.Now()
				failover(t, ctx, srv)
				mu.Lock()
				res.failover = time.Since(start)
				mu.Unlock()
			}()
		}
		key := fmt.Sprintf("failover-%d-%d", replicas, i)
		for {
			lk, err := holder.TryLock(ctx, key)
			if err == nil {
				mu.Lock()
				helds = append(helds, held{key, lk})
				res.taken++
				mu.Unlock()
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("lock %d: %v", i, err)
			}
			mu.Lock()
			res.failedAttempts++
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
	<-failedOver
	// Renewals of lost locks notice within a TTL; the rival keeps trying
	// meanwhile.
	time.Sleep(ttl + time.Second)
	close(stop)
	rivalW.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, h := range helds {
		select {
		case <-h.lk.Done():
			res.lost++
		default:
		}
	}
	return res
}

// failover runs SENTINEL FAILOVER and returns once the sentinels name
// another primary and a replica of it is in sync again (so that the next
// failover, or a WAIT, can succeed).
func failover(t testing.TB, ctx context.Context, srv *testenv.RedisSentinelServer) {
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: srv.SentinelAddrs()[0]})
	defer sc.Close()
	primary := func() string {
		addr, err := sc.GetMasterAddrByName(ctx, testenv.SentinelMaster).Result()
		if err != nil || len(addr) != 2 {
			return ""
		}
		return addr[0] + ":" + addr[1]
	}
	old := primary()
	if err := sc.Failover(ctx, testenv.SentinelMaster).Err(); err != nil {
		t.Errorf("SENTINEL FAILOVER: %v", err)
		return
	}
	for {
		if p := primary(); p != "" && p != old {
			c := goredis.NewClient(&goredis.Options{Addr: p})
			info, _ := c.Info(ctx, "replication").Result()
			_ = c.Close()
			if strings.Contains(info, "connected_slaves:1") && strings.Contains(info, ",state=online,") {
				return
			}
		}
		if ctx.Err() != nil {
			t.Errorf("the sentinels never named another primary than %s with its replica online: %v", old, ctx.Err())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConformanceSentinel runs the suite through go-redis's failover client
// with Config.Replicas 1, its Failover hook running SENTINEL FAILOVER and its
// Isolate hook cutting the proxies through which a Locker's client reaches
// the sentinels and the data nodes.
func TestConformanceSentinel(t *testing.T) {
	conformance.Run(t, sentinelHarness(t, redis.Config{Replicas: 1}))
}

// TestConformanceSentinelOwnClient runs the suite of TestConformanceSentinel
// on Lockers made with Config.OwnClient: each Locker's client of its own
// dials through its caller's failover client, which asks the sentinels for
// the primary, through the caller's proxies. Crash closes the caller's
// client before it cuts the proxies: the Locker's client can then dial no
// more, as after a crash. Busy fills the caller's pools, beside which the
// Locker must work. It runs after TestConformanceSentinel, on a deployment
// of its own, not beside it: side by side, TestConformanceSentinel's
// Cancellation found a cancelled Lock's late grant still held TTL/2 after
// the Unlock, once in three runs at load 3 to 5.
func TestConformanceSentinelOwnClient(t *testing.T) {
	conformance.Run(t, sentinelHarness(t, redis.Config{Replicas: 1, OwnClient: true}))
}

// sentinelHarness is the conformance harness of Lockers made with cfg on
// a Sentinel deployment of its own, through go-redis's failover client:
// its Failover hook runs SENTINEL FAILOVER, and its Isolate hook cuts the
// proxies through which a Locker's client reaches the sentinels and the
// data nodes.
func sentinelHarness(t *testing.T, cfg redis.Config) conformance.Harness {
	srv := testenv.NewRedisSentinel(t)
	admin := failoverClient(t, srv)
	mk := func(t testing.TB, c *goredis.Client, opts ...locker.Option) (locker.Locker, error) {
		return cfg.New(c, append([]locker.Option{locker.WithTTL(testTTL)}, opts...)...)
	}
	var reps redistest.Replicas
	return conformance.Harness{
		TTL:         testTTL,
		MultiAtomic: true, // one script on the primary
		NewLocker: func(t testing.TB) locker.Locker {
			dial, proxies := redistest.ProxiedDialer(t, append(srv.SentinelAddrs(), srv.DataAddrs()...))
			c := failoverClientVia(t, srv, dial)
			l, err := mk(t, c)
			if err != nil {
				t.Errorf("New: %v", err)
				return nil
			}
			reps.Add(l, redistest.Replica{Client: c, Proxies: proxies})
			return l
		},
		NewLockerWith: func(t testing.TB, opts ...locker.Option) (locker.Locker, error) {
			return mk(t, failoverClient(t, srv), opts...)
		},
		Crash:   reps.Crash,
		Isolate: reps.Isolate,
		DeleteBehind: func(t testing.TB, key string) {
			if err := admin.Del(context.Background(), redis.KeysOf(key).Lock).Err(); err != nil {
				t.Errorf("DEL %s: %v", redis.KeysOf(key).Lock, err)
			}
		},
		Failover: func(t testing.TB) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			failover(t, ctx, srv)
		},
		Busy:        reps.Busy(admin),
		MaxKeyBytes: redis.MaxKeyBytes,
	}
}

// mustParse parses a URL the test wrote.
func mustParse(t testing.TB, raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
