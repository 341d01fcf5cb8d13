package etcd_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/integration/internal/sharedbench"
)

// BenchmarkSharedUncontended: see sharedbench.Uncontended.
func BenchmarkSharedUncontended(b *testing.B) {
	sharedbench.Uncontended(b, benchLocker(b, newClient(b, benchEtcd(b))), uniqueKey(b))
}

// BenchmarkSharedHandoff: see sharedbench.Handoff.
func BenchmarkSharedHandoff(b *testing.B) {
	eps := benchEtcd(b)
	sharedbench.Handoff(b, benchLocker(b, newClient(b, eps)), benchLocker(b, newClient(b, eps)), uniqueKey(b))
}

// BenchmarkSharedThroughput: see sharedbench.ThroughputTraffic. A round
// trip is an RPC message a client sent, as in BenchmarkSharedRenewal.
//
//	go test -run '^$' -bench SharedThroughput ./integration/etcd/
func BenchmarkSharedThroughput(b *testing.B) {
	var h trafficHandler
	cfg := clientConfig(benchEtcd(b))
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithStatsHandler(&h))
	sharedbench.ThroughputTraffic(b, func() locker.Locker {
		cli, err := clientv3.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cli.Close() })
		return benchLocker(b, cli)
	}, uniqueKey(b), func() (int64, int64) { return h.trips.Load(), h.bytes.Load() })
}

// BenchmarkSharedRenewal: see sharedbench.Renewal. A round trip is an RPC
// message the Locker's client sent (a unary call, or a message on a
// stream, such as a lease keep-alive); the bytes are those of every message,
// both ways, as gRPC puts them on the wire.
//
//	go test -run '^$' -bench SharedRenewal -benchtime 4x ./integration/etcd/
func BenchmarkSharedRenewal(b *testing.B) {
	var h trafficHandler
	cfg := clientConfig(benchEtcd(b))
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithStatsHandler(&h))
	cli, err := clientv3.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	sharedbench.Renewal(b, func(o locker.Observer) locker.Locker {
		l, err := etcd.New(cli, locker.WithTTL(10*time.Second), locker.WithPrefix("locker-bench/"), locker.WithObserver(o))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return l
	}, func() (int64, int64) { return h.trips.Load(), h.bytes.Load() }, uniqueKey(b))
}

// trafficHandler counts the RPC messages a gRPC client sends and the bytes
// of the messages both ways.
type trafficHandler struct{ trips, bytes atomic.Int64 }

func (h *trafficHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (h *trafficHandler) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.OutPayload:
		h.trips.Add(1)
		h.bytes.Add(int64(p.WireLength))
	case *stats.InPayload:
		h.bytes.Add(int64(p.WireLength))
	}
}

func (h *trafficHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (h *trafficHandler) HandleConn(context.Context, stats.ConnStats) {}
