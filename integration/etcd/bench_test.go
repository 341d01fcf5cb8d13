package etcd_test

// Benchmarks against the embedded single-member etcd (or
// LOCKER_ETCD_ENDPOINTS when set). Each one measures, in the same run, the
// raw etcd floor and etcd's own concurrency.Mutex, and reports our figures as
// ratios:
//
//	go test -run '^$' -bench . ./etcd/
//
//   - LockUnlock: an uncontended Lock+Unlock, interleaved with the floor (a
//     put-if-absent Txn with a lease plus a delete, on the same client) and
//     with concurrency.Mutex Lock+Unlock; reports x-floor and mutex-x-floor.
//   - Handoff/{locker,mutex}: from the holder's release to the return of the
//     Lock another client has been waiting in for 20 ms; p50/p90 in ms. The
//     locker run also measures, interleaved, how long a delete made after
//     the same pause takes to reach a watch of the key (watch-p50-ms), the
//     least a hand-off can cost, and reports the ratio (x-watch).
//   - Contended/{locker,mutex}: four contenders, each with its own client,
//     lock and unlock one key; acquisitions per second (handoffs/s).

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/golocker/locker"
	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/internal/testenv"
)

// benchEtcd returns LOCKER_ETCD_ENDPOINTS when set, else the shared embedded
// etcd.
func benchEtcd(b *testing.B) []string {
	if eps, ok := testenv.EtcdEndpoints(); ok {
		return eps
	}
	return sharedEtcd(b)
}

func benchLocker(b *testing.B, cli *clientv3.Client) locker.Locker {
	b.Helper()
	l, err := etcd.New(cli, locker.WithTTL(10*time.Second), locker.WithPrefix("locker-bench/"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

func benchSession(b *testing.B, cli *clientv3.Client) *concurrency.Session {
	b.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile returns the p-quantile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	return sorted[int(p*float64(len(sorted)-1))]
}

func BenchmarkLockUnlock(b *testing.B) {
	eps := benchEtcd(b)
	cli := newClient(b, eps)
	ctx := b.Context()
	l := benchLocker(b, cli)
	m := concurrency.NewMutex(benchSession(b, cli), "locker-bench-mutex/"+uniqueKey(b))
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Revoke(context.WithoutCancel(ctx), lease.ID)
	key := uniqueKey(b)
	floorKey := "locker-bench-floor/" + key

	floorOp := func() {
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(floorKey), "=", 0)).
			Then(clientv3.OpPut(floorKey, "", clientv3.WithLease(lease.ID))).
			Commit()
		if err != nil || !resp.Succeeded {
			b.Fatalf("floor put-if-absent: %v, %v", resp, err)
		}
		if _, err := cli.Delete(ctx, floorKey); err != nil {
			b.Fatal(err)
		}
	}
	oursOp := func() {
		lk, err := l.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	mutexOp := func() {
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// The three run in turn, in a rotating order, so that drift and the
	// position in the round weigh on each alike.
	ops := []func(){floorOp, oursOp, mutexOp}
	var spent [3]time.Duration
	n := 0
	for b.Loop() {
		for j := range 3 {
			k := (n + j) % 3
			t := time.Now()
			ops[k]()
			spent[k] += time.Since(t)
		}
		n++
	}
	floor, ours, mutex := spent[0], spent[1], spent[2]
	b.ReportMetric(float64(ours.Nanoseconds())/float64(n), "ns/op")
	b.ReportMetric(float64(floor.Nanoseconds())/float64(n), "floor-ns/op")
	b.ReportMetric(float64(mutex.Nanoseconds())/float64(n), "mutex-ns/op")
	b.ReportMetric(float64(ours)/float64(floor), "x-floor")
	b.ReportMetric(float64(mutex)/float64(floor), "mutex-x-floor")
}

// handoffWait is how long the waiter has been waiting when the holder
// releases.
const handoffWait = 20 * time.Millisecond

func BenchmarkHandoff(b *testing.B) {
	eps := benchEtcd(b)
	report := func(b *testing.B, prefix string, lats []time.Duration) time.Duration {
		slices.Sort(lats)
		b.ReportMetric(ms(percentile(lats, 0.5)), prefix+"p50-ms")
		b.ReportMetric(ms(percentile(lats, 0.9)), prefix+"p90-ms")
		return percentile(lats, 0.5)
	}
	b.Run("locker", func(b *testing.B) {
		ctx := b.Context()
		holder, waiter := benchLocker(b, newClient(b, eps)), benchLocker(b, newClient(b, eps))
		wcli := newClient(b, eps)
		key := uniqueKey(b)
		var lats, watchLats []time.Duration
		for range b.N {
			b.StopTimer()
			watchLats = append(watchLats, watchDelete(b, wcli, "locker-bench-watch/"+key))
			lk, err := holder.Lock(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			res := make(chan time.Time, 1)
			done := make(chan struct{})
			go func() {
				defer close(done)
				wl, err := waiter.Lock(ctx, key)
				if err != nil {
					b.Error(err)
					res <- time.Time{}
					return
				}
				res <- time.Now()
				wl.Unlock(ctx)
			}()
			time.Sleep(handoffWait)
			b.StartTimer()
			start := time.Now()
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			at := <-res
			b.StopTimer()
			<-done
			if at.IsZero() {
				b.FailNow()
			}
			lats = append(lats, at.Sub(start))
		}
		p50 := report(b, "handoff-", lats)
		w50 := report(b, "watch-", watchLats)
		b.ReportMetric(float64(p50)/float64(w50), "x-watch")
	})
	b.Run("mutex", func(b *testing.B) {
		ctx := b.Context()
		pfx := "locker-bench-mutex/" + uniqueKey(b)
		holder := concurrency.NewMutex(benchSession(b, newClient(b, eps)), pfx)
		waiter := concurrency.NewMutex(benchSession(b, newClient(b, eps)), pfx)
		var lats []time.Duration
		for range b.N {
			b.StopTimer()
			if err := holder.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			res := make(chan time.Time, 1)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if err := waiter.Lock(ctx); err != nil {
					b.Error(err)
					res <- time.Time{}
					return
				}
				res <- time.Now()
				waiter.Unlock(ctx)
			}()
			time.Sleep(handoffWait)
			b.StartTimer()
			start := time.Now()
			if err := holder.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			at := <-res
			b.StopTimer()
			<-done
			if at.IsZero() {
				b.FailNow()
			}
			lats = append(lats, at.Sub(start))
		}
		report(b, "handoff-", lats)
	})
}

// watchDelete measures how long a delete takes to reach a watch of the key:
// the least a hand-off can cost.
func watchDelete(b *testing.B, cli *clientv3.Client, key string) time.Duration {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	put, err := cli.Put(ctx, key, "")
	if err != nil {
		b.Fatal(err)
	}
	wch := cli.Watch(ctx, key, clientv3.WithRev(put.Header.Revision+1), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		b.Fatalf("watch not created: %v", wr.Err())
	}
	// Idle as long as the hand-off's holder: the first request after a
	// pause is slower.
	time.Sleep(handoffWait)
	start := time.Now()
	if _, err := cli.Delete(ctx, key); err != nil {
		b.Fatal(err)
	}
	for wr := range wch {
		if len(wr.Events) > 0 {
			return time.Since(start)
		}
	}
	b.Fatal("watch ended")
	return 0
}

const contenders = 4

func BenchmarkContended(b *testing.B) {
	eps := benchEtcd(b)
	run := func(b *testing.B, lockUnlock []func(context.Context) error) {
		ctx := b.Context()
		var n atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		start := time.Now()
		for _, f := range lockUnlock {
			wg.Go(func() {
				for n.Add(1) <= int64(b.N) {
					if err := f(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "handoffs/s")
	}
	b.Run("locker", func(b *testing.B) {
		key := uniqueKey(b)
		var fs []func(context.Context) error
		for range contenders {
			l := benchLocker(b, newClient(b, eps))
			fs = append(fs, func(ctx context.Context) error {
				lk, err := l.Lock(ctx, key)
				if err != nil {
					return err
				}
				return lk.Unlock(ctx)
			})
		}
		run(b, fs)
	})
	b.Run("mutex", func(b *testing.B) {
		pfx := "locker-bench-mutex/" + uniqueKey(b)
		var fs []func(context.Context) error
		for range contenders {
			m := concurrency.NewMutex(benchSession(b, newClient(b, eps)), pfx)
			fs = append(fs, func(ctx context.Context) error {
				if err := m.Lock(ctx); err != nil {
					return err
				}
				return m.Unlock(ctx)
			})
		}
		run(b, fs)
	})
}

// BenchmarkConformance runs the shared benchmarks, with Lockers on direct
// clients.
func BenchmarkConformance(b *testing.B) {
	eps := benchEtcd(b)
	conformance.RunBenchmarks(b, conformance.Harness{
		TTL: testTTL,
		NewLocker: func(t testing.TB) locker.Locker {
			cli, err := clientv3.New(clientConfig(eps))
			if err != nil {
				t.Error(err)
				return nil
			}
			t.Cleanup(func() { cli.Close() })
			l, err := etcd.New(cli, locker.WithTTL(testTTL), locker.WithPrefix("locker-bench/"))
			if err != nil {
				t.Error(err)
				return nil
			}
			return l
		},
	})
}
