package redlock_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/golocker/locker"
	scen "github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// BenchmarkRedlock runs, in the same run and on dedicated local
// redis-servers, an uncontended Lock+Unlock and a hand-off (package
// contend's scenarios) of a single-node Locker (on the first master) and of
// Redlock over 3 and 5 masters. Redlock's acquisition is two round trips to
// every master (in parallel), its release one; its waiters poll with the
// default backoff (no queue, no pub/sub), so a hand-off is the rest of the
// waiter's backoff step plus an acquisition.
//
//	go test -run '^$' -bench Redlock ./integration/redis/redlock/
func BenchmarkRedlock(b *testing.B) {
	masters := testenv.NewRedisMasters(b, 5)
	const ttl = 10 * time.Second
	impls := []scen.Impl{
		{Name: "redis", New: scen.Locker(func(b *testing.B) locker.Locker {
			l, err := redis.New(newClient(b, masters[0].Addr()), locker.WithTTL(ttl))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}).New},
	}
	for _, n := range []int{3, 5} {
		impls = append(impls, scen.Impl{Name: "redlock" + strconv.Itoa(n), New: scen.Locker(func(b *testing.B) locker.Locker {
			cs := make([]redis.Master, n)
			for i := range cs {
				cs[i] = newClient(b, masters[i].Addr())
			}
			// Fresh servers that never held a lock: no restart delay.
			l, err := redis.RedlockConfig{RestartDelay: time.Millisecond}.New(cs, locker.WithTTL(ttl))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}).New})
	}
	b.Run("Uncontended", func(b *testing.B) { scen.Uncontended(b, impls) })
	b.Run("Handoff", func(b *testing.B) { scen.Handoff(b, impls, 50) })
}
