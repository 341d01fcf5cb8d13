package zookeeper_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// benchConn is a direct connection with a session, for benchmarks.
func benchConn(b *testing.B, addr string) (*zk.Conn, <-chan zk.Event) {
	b.Helper()
	conn, events := connect(b, addr)
	waitSession(b, conn)
	return conn, events
}

// benchLocker is a Locker on a direct connection of its own.
func benchLocker(b *testing.B, addr string) locker.Locker {
	b.Helper()
	conn, events := benchConn(b, addr)
	l, err := zookeeper.New(conn, events, locker.WithTTL(testTTL))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// samples summarises durations.
type samples []time.Duration

func (s samples) mean() time.Duration {
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return sum / time.Duration(max(len(s), 1))
}

func (s samples) pct(p float64) time.Duration {
	c := slices.Clone(s)
	slices.Sort(c)
	return c[int(p*float64(len(c)-1))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkLockUnlock measures in one loop, interleaved so that the
// machine's load weighs on all alike, each on a connection of its own:
//
//   - floor: create an ephemeral znode and delete it (two round trips, the
//     least any ZooKeeper lock can do);
//   - locker: an uncontended Lock and Unlock of this package;
//   - zklock: the same with go-zookeeper's zk.Lock (create, list, delete).
//
// It reports the mean and median of each in µs, and the ratios of the
// means (locker-x-floor, zklock-x-floor) and of the medians
// (locker-p50-x-floor, zklock-p50-x-floor) to the floor's.
func BenchmarkLockUnlock(b *testing.B) {
	addr := testenv.ZooKeeper(b).Servers()[0]
	floorConn, _ := benchConn(b, addr)
	zkConn, _ := benchConn(b, addr)
	l := benchLocker(b, addr)
	key := uniqueKey(b)
	acl := zk.WorldACL(zk.PermAll)
	ctx := b.Context()

	floor := func() {
		p, err := floorConn.Create("/floor-"+key, nil, zk.FlagEphemeral, acl)
		if err != nil {
			b.Fatal(err)
		}
		if err := floorConn.Delete(p, -1); err != nil {
			b.Fatal(err)
		}
	}
	ours := func() {
		lk, err := l.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	zkLock := zk.NewLock(zkConn, "/zklock-bench/"+key, acl)
	theirs := func() {
		if err := zkLock.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := zkLock.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
	fns := []func(){floor, ours, theirs}
	for _, f := range fns { // create the parents
		f()
	}
	var got [3]samples
	i := 0
	for b.Loop() {
		for j := range fns {
			k := (i + j) % len(fns)
			start := time.Now()
			fns[k]()
			got[k] = append(got[k], time.Since(start))
		}
		i++
	}
	f, o, t := got[0], got[1], got[2]
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(us(f.mean()), "floor-µs")
	b.ReportMetric(us(o.mean()), "locker-µs")
	b.ReportMetric(us(t.mean()), "zklock-µs")
	b.ReportMetric(us(f.pct(0.5)), "floor-p50-µs")
	b.ReportMetric(us(o.pct(0.5)), "locker-p50-µs")
	b.ReportMetric(us(t.pct(0.5)), "zklock-p50-µs")
	b.ReportMetric(float64(o.mean())/float64(f.mean()), "locker-x-floor")
	b.ReportMetric(float64(t.mean())/float64(f.mean()), "zklock-x-floor")
	// Medians resist the outliers of a shared machine better than means.
	b.ReportMetric(float64(o.pct(0.5))/float64(f.pct(0.5)), "locker-p50-x-floor")
	b.ReportMetric(float64(t.pct(0.5))/float64(f.pct(0.5)), "zklock-p50-x-floor")
}

// handoffWait is how long the waiter has been waiting when the holder
// unlocks, as in conformance.RunBenchmarks.
const handoffWait = 20 * time.Millisecond

// BenchmarkHandoff measures the time from the holder's unlock to the return
// of the lock call another connection has been waiting in, for this package
// (locker) and for go-zookeeper's zk.Lock (zklock); it reports the
// percentiles in ms.
func BenchmarkHandoff(b *testing.B) {
	addr := testenv.ZooKeeper(b).Servers()[0]
	b.Run("locker", func(b *testing.B) {
		holder, waiter := benchLocker(b, addr), benchLocker(b, addr)
		key := uniqueKey(b)
		ctx := b.Context()
		handoff(b, func() func() {
			lk, err := holder.Lock(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			return func() {
				if err := lk.Unlock(ctx); err != nil {
					b.Error(err)
				}
			}
		}, func() (func(), error) {
			lk, err := waiter.Lock(ctx, key)
			if err != nil {
				return nil, err
			}
			return func() { _ = lk.Unlock(context.WithoutCancel(ctx)) }, nil
		})
	})
	b.Run("zklock", func(b *testing.B) {
		hc, _ := benchConn(b, addr)
		wc, _ := benchConn(b, addr)
		path := "/zklock-bench/" + uniqueKey(b)
		acl := zk.WorldACL(zk.PermAll)
		handoff(b, func() func() {
			lk := zk.NewLock(hc, path, acl)
			if err := lk.Lock(); err != nil {
				b.Fatal(err)
			}
			return func() {
				if err := lk.Unlock(); err != nil {
					b.Error(err)
				}
			}
		}, func() (func(), error) {
			lk := zk.NewLock(wc, path, acl)
			if err := lk.Lock(); err != nil {
				return nil, err
			}
			return func() { _ = lk.Unlock() }, nil
		})
	})
}

// handoff runs the hand-off loop: hold returns the holder's unlock; wait
// blocks until the waiter holds the lock and returns its unlock.
func handoff(b *testing.B, hold func() (unlock func()), wait func() (unlock func(), err error)) {
	type got struct {
		at     time.Time
		unlock func()
		err    error
	}
	var lats samples
	for b.Loop() {
		b.StopTimer()
		unlock := hold()
		res := make(chan got, 1)
		go func() {
			u, err := wait()
			res <- got{time.Now(), u, err}
		}()
		time.Sleep(handoffWait)
		b.StartTimer()
		start := time.Now()
		unlock()
		r := <-res
		b.StopTimer()
		if r.err != nil {
			b.Fatalf("the waiting lock: %v", r.err)
		}
		lats = append(lats, r.at.Sub(start))
		r.unlock()
		b.StartTimer()
	}
	b.ReportMetric(float64(lats.mean().Nanoseconds()), "ns/op")
	b.ReportMetric(ms(lats.pct(0.5)), "handoff-p50-ms")
	b.ReportMetric(ms(lats.pct(0.9)), "handoff-p90-ms")
}

// requestsPerClient is how many acquisitions each client makes in
// BenchmarkRequests.
const requestsPerClient = 50

// BenchmarkRequests counts the requests the server receives per
// acquisition (with its release) while clients, each on a session of its
// own, contend for one key: for this package (locker) and for zk.Lock
// (zklock), at 4 and 16 clients. It reports locker-requests,
// zklock-requests and their ratio locker-x-zklock. A count, not a time:
// it says how much work a lock gives the server whatever the machine's
// load (pings and a hold watch set when a hold outlasts 10 ms add a little).
// It runs once whatever b.N.
func BenchmarkRequests(b *testing.B) {
	srv := testenv.ZooKeeper(b)
	addr := srv.Servers()[0]
	for _, n := range []int{4, 16} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			impls := scenarioImpls(b, srv, func(b *testing.B) locker.Locker { return benchLocker(b, addr) }, testTTL)
			per := make([]float64, len(impls))
			for i, impl := range impls {
				key := contend.Keys(b, impl.Name, "requests")
				ms := make([]contend.Mutex, n)
				for j := range ms {
					ms[j] = impl.New(b, key)
				}
				var before int64
				requestRounds(b, impl.Name, ms, func() { before = packetsReceived(b, addr) })
				per[i] = float64(packetsReceived(b, addr)-before) / float64(n*requestsPerClient)
				b.ReportMetric(per[i], impl.Name+"-requests")
			}
			b.ReportMetric(per[0]/per[1], impls[0].Name+"-x-"+impls[1].Name)
			b.ReportMetric(0, "ns/op")
		})
	}
}

// requestRounds has each client of ms take its key once (which creates
// the key's parents), calls begin, and then has all of them take it
// requestsPerClient times each, at once. name labels the failures.
func requestRounds(b *testing.B, name string, ms []contend.Mutex, begin func()) {
	b.Helper()
	acquire := func(m contend.Mutex) error {
		unlock, err := m.Lock(b.Context())
		if err != nil {
			return fmt.Errorf("%s: lock: %w", name, err)
		}
		if err := unlock(b.Context()); err != nil {
			return fmt.Errorf("%s: unlock: %w", name, err)
		}
		return nil
	}
	for _, m := range ms {
		if err := acquire(m); err != nil {
			b.Fatal(err)
		}
	}
	begin()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			for range requestsPerClient {
				if err := acquire(m); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// packetsReceived reads how many packets (requests and pings) the server
// at addr has received, from the mntr command.
func packetsReceived(b *testing.B, addr string) int64 {
	b.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "mntr"); err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "zk_packets_received" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				b.Fatalf("mntr: %s: %v", line, err)
			}
			return n
		}
	}
	b.Fatalf("mntr answered no zk_packets_received: %q", out)
	return 0
}
