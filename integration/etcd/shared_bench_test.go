package etcd_test

import (
	"testing"
	"time"

	"github.com/golocker/locker"
)

// BenchmarkSharedUncontended compares an uncontended semaphore permit and
// read hold with a lock of the same Locker: one acquire and one release
// each, in turn, in a rotating order.
func BenchmarkSharedUncontended(b *testing.B) {
	cli := newClient(b, benchEtcd(b))
	ctx := b.Context()
	l := benchLocker(b, cli)
	key := uniqueKey(b)
	sem, err := locker.NewSemaphore(l, key+"/sem", 4)
	if err != nil {
		b.Fatal(err)
	}
	rw, err := locker.NewRWMutex(l, key+"/rw")
	if err != nil {
		b.Fatal(err)
	}
	acquire := []func() (locker.Lock, error){
		func() (locker.Lock, error) { return l.Lock(ctx, key+"/lock") },
		func() (locker.Lock, error) { return sem.Acquire(ctx) },
		func() (locker.Lock, error) { return rw.RLock(ctx) },
	}
	var spent [3]time.Duration
	n := 0
	for b.Loop() {
		for j := range 3 {
			k := (n + j) % 3
			t := time.Now()
			lk, err := acquire[k]()
			if err != nil {
				b.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			spent[k] += time.Since(t)
		}
		n++
	}
	b.ReportMetric(float64(spent[0].Nanoseconds())/float64(n), "lock-ns/op")
	b.ReportMetric(float64(spent[1].Nanoseconds())/float64(n), "sem-ns/op")
	b.ReportMetric(float64(spent[2].Nanoseconds())/float64(n), "rlock-ns/op")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "sem-x-lock")
	b.ReportMetric(float64(spent[2])/float64(spent[0]), "rlock-x-lock")
}
