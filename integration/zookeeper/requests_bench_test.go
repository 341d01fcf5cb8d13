package zookeeper_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
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
	impls := []func(c *opCounter) contend.Impl{
		func(c *opCounter) contend.Impl {
			return contend.Locker(func(b *testing.B) locker.Locker { return countedLocker(b, srv, c) })
		},
		func(c *opCounter) contend.Impl {
			return contend.Impl{Name: "zklock", New: func(b *testing.B, key string) contend.Mutex {
				conn, _ := countedConn(b, srv, c)
				return zkLockMutex(conn, "/zklock-requests/"+key)
			}}
		},
	}
	for _, n := range []int{2, 4, 16} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			var total [2]float64
			for i, newImpl := range impls {
				var c opCounter
				impl := newImpl(&c)
				key := contend.Keys(b, impl.Name, "requests-by-op")
				ms := make([]contend.Mutex, n)
				for j := range ms {
					ms[j] = impl.New(b, key)
				}
				requestRounds(b, impl.Name, ms, func() { c.take() })
				o := c.take()
				per := float64(n * requestsPerClient)
				for kind, v := range o {
					b.ReportMetric(float64(v)/per, impl.Name+"-"+metricKind(kind))
				}
				total[i] = float64(o.total()) / per
				b.ReportMetric(total[i], impl.Name+"-requests")
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
