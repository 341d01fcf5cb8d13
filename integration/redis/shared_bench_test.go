package redis_test

import (
	"strconv"
	"testing"
	"time"

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
