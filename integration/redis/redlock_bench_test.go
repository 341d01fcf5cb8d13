package redis_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// BenchmarkRedlockLockUnlock measures an uncontended Lock+Unlock on a
// single-node Locker and on Redlock over 3 and 5 masters, all on
// dedicated local redis-servers (the single node is the first master), in
// the same run. Redlock's acquisition is two round trips to every master
// (in parallel), its release one.
func BenchmarkRedlockLockUnlock(b *testing.B) {
	masters := testenv.NewRedisMasters(b, 5)
	single, err := redis.New(newClient(b, masters[0].Addr()), locker.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = single.Close() })
	run := func(b *testing.B, l locker.Locker) {
		ctx := b.Context()
		for i := 0; b.Loop(); i++ {
			lk, err := l.Lock(ctx, "bench:"+strconv.Itoa(i%64))
			if err != nil {
				b.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("redis", func(b *testing.B) { run(b, single) })
	for _, n := range []int{3, 5} {
		cs := make([]redis.Master, n)
		for i := range cs {
			cs[i] = newClient(b, masters[i].Addr())
		}
		l, err := redis.NewRedlock(cs, locker.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		b.Run("redlock-"+strconv.Itoa(n), func(b *testing.B) { run(b, l) })
	}
}
