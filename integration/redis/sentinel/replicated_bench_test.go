package sentinel_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// BenchmarkSentinelReplicatedWrites: the latency of a renewal (Extend)
// and of SetData with Config.Replicas 1, which waits for the replica, over
// the same calls without it, on one Sentinel-managed primary with its
// replica. Reported as ratios (replicated ÷ plain) and as each mean.
//
//	go test -run '^$' -bench SentinelReplicatedWrites ./integration/redis/sentinel/
func BenchmarkSentinelReplicatedWrites(b *testing.B) {
	srv := testenv.NewRedisSentinel(b)
	ctx := context.Background()
	held := func(replicas int) locker.Lock {
		l, err := redis.Config{Replicas: replicas}.New(failoverClient(b, srv), locker.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		lk, err := l.TryLock(ctx, "bench-replicated-"+strconv.Itoa(replicas))
		if err != nil {
			b.Fatal(err)
		}
		return lk
	}
	plain, replicated := held(0), held(1)
	data := []byte("10.0.0.7:8080")
	var ext, set [2]time.Duration
	b.ResetTimer()
	for b.Loop() {
		for i, lk := range []locker.Lock{plain, replicated} {
			start := time.Now()
			if err := locker.Extend(ctx, lk); err != nil {
				b.Fatal(err)
			}
			ext[i] += time.Since(start)
			start = time.Now()
			if err := locker.SetData(ctx, lk, data); err != nil {
				b.Fatal(err)
			}
			set[i] += time.Since(start)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(ext[1])/float64(ext[0]), "extend-replicated/plain")
	b.ReportMetric(float64(set[1])/float64(set[0]), "setdata-replicated/plain")
	b.ReportMetric(float64(ext[0].Microseconds())/n, "extend-plain-µs")
	b.ReportMetric(float64(ext[1].Microseconds())/n, "extend-replicated-µs")
	b.ReportMetric(float64(set[0].Microseconds())/n, "setdata-plain-µs")
	b.ReportMetric(float64(set[1].Microseconds())/n, "setdata-replicated-µs")
}
