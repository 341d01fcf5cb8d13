package redis_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/sharedbench"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// BenchmarkSharedThroughput: see sharedbench.Throughput; each client has
// its own go-redis client.
//
//	go test -run '^$' -bench SharedThroughput ./integration/redis/
func BenchmarkSharedThroughput(b *testing.B) {
	addr := testenv.Redis(b).Addr()
	sharedbench.Throughput(b, func() locker.Locker {
		l, err := redis.New(newClient(b, addr), locker.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}, "bench-shared:"+strconv.FormatInt(time.Now().UnixNano(), 36))
}

// BenchmarkSharedHandoff: see sharedbench.Handoff; holder and waiter are
// Lockers of their own, each on its own go-redis client.
//
//	go test -run '^$' -bench SharedHandoff -benchtime 200x ./integration/redis/
func BenchmarkSharedHandoff(b *testing.B) {
	addr := testenv.Redis(b).Addr()
	newLocker := func() locker.Locker {
		l, err := redis.New(newClient(b, addr), locker.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	sharedbench.Handoff(b, newLocker(), newLocker(), "bench-handoff:"+strconv.FormatInt(time.Now().UnixNano(), 36))
}

// BenchmarkSharedRenewal: see sharedbench.Renewal. A round trip is a
// command or a pipeline sent by the Locker's go-redis client; the bytes are
// those of its connections, both ways.
//
//	go test -run '^$' -bench SharedRenewal -benchtime 5x ./integration/redis/
func BenchmarkSharedRenewal(b *testing.B) {
	addr := testenv.Redis(b).Addr()
	var h trafficHook
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	rdb.AddHook(&h)
	b.Cleanup(func() { _ = rdb.Close() })
	sharedbench.Renewal(b, func(o locker.Observer) locker.Locker {
		l, err := redis.New(rdb, locker.WithTTL(3*time.Second), locker.WithObserver(o))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}, func() (int64, int64) { return h.trips.Load(), h.bytes.Load() }, "bench-renewal:"+strconv.FormatInt(time.Now().UnixNano(), 36))
}

// trafficHook counts a go-redis client's round trips (commands and
// pipelines) and the bytes of its connections.
type trafficHook struct{ trips, bytes atomic.Int64 }

func (h *trafficHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, n: &h.bytes}, nil
	}
}

func (h *trafficHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.trips.Add(1)
		return next(ctx, cmd)
	}
}

func (h *trafficHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.trips.Add(1)
		return next(ctx, cmds)
	}
}

// countingConn adds the bytes read and written to n.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.n.Add(int64(k))
	return k, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	k, err := c.Conn.Write(p)
	c.n.Add(int64(k))
	return k, err
}
