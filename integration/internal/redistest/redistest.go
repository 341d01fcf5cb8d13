// Package redistest holds what the Redis integration test packages
// (integration/redis and the packages below it) share: their go-redis
// client options, the TTL of their conformance harnesses, and the
// bookkeeping behind the harnesses' Crash and Isolate hooks.
package redistest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/busywork"
	"github.com/golocker/locker/integration/internal/slowlink"
	"github.com/golocker/locker/internal/testenv"
)

// TTL is the TTL of the conformance harnesses.
const TTL = 1500 * time.Millisecond

// Protocol is the RESP version of every test client.
const Protocol = 3

// ClientOptions are the go-redis options of every test client: ctx
// deadlines bound every call (as the redis package doc recommends), and
// reads time out well within a renewal interval.
func ClientOptions(addr string) *goredis.Options {
	return &goredis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		DialTimeout:           time.Second,
		Protocol:              Protocol,
	}
}

// NewClient returns a client of addr closed when the test ends.
func NewClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(ClientOptions(addr))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NewCluster returns a cluster client, closed when the test ends, whose
// connections to node addr go through dial (nil: directly).
func NewCluster(t testing.TB, addrs []string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *goredis.ClusterClient {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{
		Addrs:                 addrs,
		ContextTimeoutEnabled: true,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		DialTimeout:           time.Second,
		Dialer:                dial,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Closer is a go-redis client that can be closed (Crash).
type Closer interface{ Close() error }

// Replicas records, for every Locker a harness made, the client to close
// on Crash and the proxies to cut on Isolate. Its zero value is empty and
// ready; its methods may be called concurrently.
type Replicas struct {
	mu sync.Mutex
	m  map[locker.Locker]Replica
}

// Replica is what Replicas records for one Locker.
type Replica struct {
	// Client is closed on Crash, and Proxies are cut for good; nil for
	// a Locker that owns its client.
	Client Closer
	// Proxies are cut on Isolate and healed when it ends.
	Proxies []*testenv.Proxy
	// Links are the Locker's links to each store node, in node order,
	// for Slow; nil when it cannot slow one node.
	Links []*slowlink.Link
}

// Add records rep for l.
func (r *Replicas) Add(l locker.Locker, rep Replica) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[locker.Locker]Replica)
	}
	r.m[l] = rep
}

func (r *Replicas) get(t testing.TB, l locker.Locker) (Replica, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.m[l]
	if !ok {
		t.Errorf("the Locker was not made by this harness")
	}
	return rep, ok
}

// Crash closes the Locker's client, if it has one the caller gave it, and
// cuts its proxies for good, as a crashed process's connections all end:
// a Locker that renews on a client of its own (redis.New copies the
// caller's) or owns its client stops talking too. It fails t for a Locker
// that was not added.
func (r *Replicas) Crash(t testing.TB, l locker.Locker) {
	rep, ok := r.get(t, l)
	if !ok {
		return
	}
	if rep.Client != nil {
		_ = rep.Client.Close()
	}
	for _, p := range rep.Proxies {
		p.Cut()
	}
}

// Isolate cuts the Locker's proxies and returns the func that heals them.
// It fails t for a Locker that was not added.
func (r *Replicas) Isolate(t testing.TB, l locker.Locker) func() {
	rep, ok := r.get(t, l)
	if !ok {
		return func() {}
	}
	for _, p := range rep.Proxies {
		p.Cut()
	}
	return func() {
		for _, p := range rep.Proxies {
			p.Heal()
		}
	}
}

// Slow makes node slow by d for the Locker (conformance.Harness.Slow). It
// fails t for a Locker that was not added or a node it has no link to.
func (r *Replicas) Slow(t testing.TB, l locker.Locker, node int, d time.Duration) func() {
	rep, ok := r.get(t, l)
	if !ok {
		return func() {}
	}
	if node < 0 || node >= len(rep.Links) {
		t.Errorf("Slow: node %d of %d", node, len(rep.Links))
		return func() {}
	}
	return rep.Links[node].Slow(d)
}

// Busy keeps the Locker's client busy with the caller's own blocking
// commands (conformance.Harness.Busy), until the returned function ends
// them: see [Busy]. admin, a client of the same server, ends them. It
// fails t for a Locker that was not added or whose client is neither a
// *goredis.Client nor a *goredis.ClusterClient ([BusyCluster]).
func (r *Replicas) Busy(admin goredis.Cmdable) func(t testing.TB, l locker.Locker) func() {
	return func(t testing.TB, l locker.Locker) func() {
		rep, ok := r.get(t, l)
		if !ok {
			return func() {}
		}
		switch c := rep.Client.(type) {
		case *goredis.Client:
			return Busy(t, c, admin)
		case *goredis.ClusterClient:
			return BusyCluster(t, c, admin)
		}
		t.Errorf("Busy: the Locker's client is a %T, not a go-redis client or cluster client", rep.Client)
		return func() {}
	}
}

// ProxiedDialer returns a dialer that reaches each of addrs through a
// proxy of its own (and refuses any other address), and the proxies, for a
// client whose every connection Isolate must cut.
func ProxiedDialer(t testing.TB, addrs []string) (func(ctx context.Context, network, addr string) (net.Conn, error), []*testenv.Proxy) {
	proxies := make(map[string]*testenv.Proxy, len(addrs))
	all := make([]*testenv.Proxy, 0, len(addrs))
	for _, a := range addrs {
		p := testenv.NewProxy(t, a)
		proxies[a] = p
		all = append(all, p)
	}
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		p := proxies[addr] // read-only once made
		if p == nil {
			return nil, fmt.Errorf("test dialer: no proxy for %s", addr)
		}
		return d.DialContext(ctx, network, p.Addr())
	}, all
}

// BusyCluster is [Busy] on every master of a cluster client, each
// node's pools filled with commands on a key of the node's slots.
func BusyCluster(t testing.TB, c *goredis.ClusterClient, admin goredis.Cmdable) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		keys []string // one per master
	)
	// ForEachMaster calls its function for every master at once.
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
		for i := 0; ; i++ {
			key := fmt.Sprintf("busywork:{%d}:%s", i, rand.Text())
			m, err := c.MasterForKey(ctx, key)
			if err != nil {
				return err
			}
			if m.Options().Addr == node.Options().Addr {
				mu.Lock()
				keys = append(keys, key)
				mu.Unlock()
				return nil
			}
		}
	})
	if err != nil {
		t.Errorf("BusyCluster: %v", err)
		return func() {}
	}
	o := c.Options()
	plain := o.PoolSize
	if plain == 0 {
		plain = 10 * runtime.GOMAXPROCS(0) // go-redis's default
	}
	return busy(t, c, admin, keys, plain, o.PipelinePoolSize)
}

// Busy keeps every connection of c busy with the caller's own blocking
// commands (conformance.Harness.Busy): a BLPOP on each connection of its
// pool, and one in a pipeline on each connection of its pipeline pool,
// on a key of their own that admin's LPUSHes end. It returns the function
// that ends them, run at the latest when t ends.
func Busy(t testing.TB, c *goredis.Client, admin goredis.Cmdable) func() {
	t.Helper()
	o := c.Options()
	return busy(t, c, admin, []string{"busywork:" + rand.Text()}, o.PoolSize, o.PipelinePoolSize)
}

// busy fills, for each key of keys (one per server), plain connections
// of c's pool with a BLPOP of the key, and piped connections of its
// pipeline pool (go-redis's default when 0, none when negative) with one
// in a pipeline.
func busy(t testing.TB, c goredis.UniversalClient, admin goredis.Cmdable, keys []string, plain, piped int) func() {
	t.Helper()
	if piped == 0 {
		piped = goredis.DefaultPipelinePoolSize
	}
	piped = max(piped, 0)
	t.Cleanup(func() { _ = admin.Del(context.Background(), keys...).Err() })
	inUse := func(s *goredis.PoolStats) int {
		if s == nil {
			return 0
		}
		return int(s.TotalConns) - int(s.IdleConns)
	}
	taken := func() int {
		s := c.PoolStats()
		return inUse(s) + inUse((*goredis.PoolStats)(s.PipelineStats))
	}
	return busywork.Start(t, (plain+piped)*len(keys), taken, func(ctx context.Context, i int) error {
		key := keys[i%len(keys)]
		// A blocking read that its ctx does not end: a value pushed
		// when it ends does.
		stop := context.AfterFunc(ctx, func() { _ = admin.LPush(context.Background(), key, 1).Err() })
		defer stop()
		if i/len(keys) < plain {
			return c.BLPop(ctx, 0, key).Err()
		}
		// A pipeline's read does not wait past the client's ReadTimeout
		// for a blocking command: BLPOPs shorter than it, one after
		// another.
		for ctx.Err() == nil {
			_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error { return p.BLPop(ctx, pipedWait, key).Err() })
			if err != nil && !errors.Is(err, goredis.Nil) {
				return err
			}
		}
		return ctx.Err()
	})
}

// pipedWait is the timeout of busy's pipelined BLPOPs: half the test
// clients' ReadTimeout.
const pipedWait = 500 * time.Millisecond
