package redis_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// BenchmarkLockMulti compares, uncontended on one redis-server, a Lock and
// Unlock of one key with a LockMulti and Unlock of three:
//
//	go test -run '^$' -bench LockMulti ./integration/redis/
func BenchmarkLockMulti(b *testing.B) {
	addr := testenv.Redis(b).Addr()
	l, err := redis.New(newClient(b, addr), locker.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := b.Context()
	b.Run("Lock1", func(b *testing.B) {
		key := "bench-multi:" + strconv.FormatInt(time.Now().UnixNano(), 36)
		for b.Loop() {
			lk, err := l.Lock(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("LockMulti3", func(b *testing.B) {
		base := "bench-multi:" + strconv.FormatInt(time.Now().UnixNano(), 36)
		keys := []string{base + ":a", base + ":b", base + ":c"}
		for b.Loop() {
			ml, err := locker.LockMulti(ctx, l, keys)
			if err != nil {
				b.Fatal(err)
			}
			if err := ml.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
