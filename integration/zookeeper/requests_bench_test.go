package zookeeper_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/zookeeper"
)

// BenchmarkRequestsByOp counts the requests the clients send per
// acquisition (with its release) while clients, each on a session of its
// own, contend for one key, by kind (see opCounter): for this package
// (locker) and for zk.Lock (zklock), at 2, 4 and 16 clients. It reports
// <impl>-<kind> per acquisition (a multi-operation's kind as
// multi-<its operations>, getData(own) as getData-own: a holder watching
// its own node), <impl>-requests (all of them) and locker-x-zklock. Where
// BenchmarkRequests counts what the server receives, this says which
// requests they are. It runs once whatever b.N.
//
//	go test -run '^$' -bench RequestsByOp ./integration/zookeeper/
func BenchmarkRequestsByOp(b *testing.B) {
	srv := testenv.ZooKeeper(b)
	impls := []struct {
		name string
		new  func(b *testing.B, c *opCounter, key string) contend.Mutex
	}{
		{"locker", func(b *testing.B, c *opCounter, key string) contend.Mutex {
			conn, events := countedConn(b, srv, c)
			l, err := zookeeper.New(conn, events, locker.WithTTL(testTTL))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return contend.Func(func(ctx context.Context) (func(context.Context) error, error) {
				lk, err := l.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return lk.Unlock, nil
			})
		}},
		{"zklock", func(b *testing.B, c *opCounter, key string) contend.Mutex {
			conn, _ := countedConn(b, srv, c)
			path := "/zklock-requests/" + key
			acl := zk.WorldACL(zk.PermAll)
			return contend.Func(func(context.Context) (func(context.Context) error, error) {
				lk := zk.NewLock(conn, path, acl)
				if err := lk.Lock(); err != nil {
					return nil, err
				}
				return func(context.Context) error { return lk.Unlock() }, nil
			})
		}},
	}
	for _, n := range []int{2, 4, 16} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			var total [2]float64
			for i, impl := range impls {
				var c opCounter
				key := contend.Keys(b, impl.name, "requests-by-op")
				ms := make([]contend.Mutex, n)
				for j := range ms {
					ms[j] = impl.new(b, &c, key)
				}
				acquire := func(m contend.Mutex) {
					unlock, err := m.Lock(b.Context())
					if err != nil {
						b.Fatalf("%s: lock: %v", impl.name, err)
					}
					if err := unlock(b.Context()); err != nil {
						b.Fatalf("%s: unlock: %v", impl.name, err)
					}
				}
				for _, m := range ms { // create the key's parents, settle the ACL
					acquire(m)
				}
				c.take()
				var wg sync.WaitGroup
				for _, m := range ms {
					wg.Go(func() {
						for range requestsPerClient {
							acquire(m)
						}
					})
				}
				wg.Wait()
				o := c.take()
				per := float64(n * requestsPerClient)
				for kind, v := range o {
					b.ReportMetric(float64(v)/per, impl.name+"-"+metricKind(kind))
				}
				total[i] = float64(o.total()) / per
				b.ReportMetric(total[i], impl.name+"-requests")
			}
			b.ReportMetric(total[0]/total[1], "locker-x-zklock")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// metricKind turns a request kind into a metric name: no parentheses or
// commas.
func metricKind(kind string) string {
	return strings.NewReplacer("(", "-", ")", "", ",", "-").Replace(kind)
}
