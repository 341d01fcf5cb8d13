package redis_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/renewtest"
	"github.com/golocker/locker/redis"
)

// BenchmarkRenewal measures what the renewal client costs: one lock's
// renewal (an Extend, which runs a round's pipeline) and an uncontended
// Lock+Unlock, on a Locker from New (run with -bench=Renewal).
func BenchmarkRenewal(b *testing.B) {
	open := func(b *testing.B) locker.Locker {
		c := goredis.NewClient(&goredis.Options{Addr: redisAddr})
		b.Cleanup(func() { _ = c.Close() })
		l, err := redis.New(c)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	renewtest.Bench(b, open)
}
