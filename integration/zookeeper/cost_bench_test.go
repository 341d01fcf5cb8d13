package zookeeper_test

import (
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
)

// Turns of BenchmarkHandoffCost: the first of each implementation warms
// up and is not counted.
const (
	costTurns    = 4
	costTurnTime = 4 * time.Second
	costClients  = 16
)

// BenchmarkHandoffCost measures what a contended hand-off costs the client:
// 16 clients on one key, this library (locker) and zk.Lock (zklock) taking
// turns of 4 s per kind of ctx (see package contend) on the test server, the
// first turn of each not counted. It
// reports, over the counted turns, this process's CPU time per hand-off
// (locker-cpu-per-handoff-µs, zklock-cpu-per-handoff-µs, and their ratio
// locker-cpu-x-zklock), its heap allocations per hand-off (the turn's
// warm-up and client set-up included: locker-allocs-per-handoff,
// zklock-allocs-per-handoff, locker-allocs-x-zklock), the goroutines it
// started per hand-off (locker-goroutines-per-handoff and
// zklock-goroutines-per-handoff, a count that load does not blur), the
// times its goroutines were scheduled after a start or a wake-up
// (locker-runs-per-handoff, zklock-runs-per-handoff: the runtime counts a
// sample of them, so only their ratio says much), the server's CPU time per hand-off (locker-server-cpu-x-zklock, when the
// harness can read it), and the geometric mean over the turns of the
// hand-off rates' ratio (locker-rate-x-zklock). The other metrics are the
// last turn's, as contend.OneKey reports them.
//
//	go test -run '^$' -bench HandoffCost ./integration/zookeeper/
func BenchmarkHandoffCost(b *testing.B) {
	srv := testenv.ZooKeeper(b)
	addr := srv.Servers()[0]
	handoffCost(b, scenarioImpls(b, srv, func(b *testing.B) locker.Locker { return benchLocker(b, addr) }, testTTL))
}

// BenchmarkHandoffCostProduction is BenchmarkHandoffCost on the server and
// clients of BenchmarkScenariosProduction: the stock JVM with 2 s ticks,
// Lockers opened through the zk:// URL with a TTL of productionTTL. The
// implementations first warm the JVM up as there (warmUp): the server's
// compiler works for seconds on each one's code paths, and its CPU time
// would count against whichever implementation runs then.
func BenchmarkHandoffCostProduction(b *testing.B) {
	srv := testenv.ZooKeeperProduction(b)
	impls := scenarioImpls(b, srv, urlLockers(b, srv, productionTTL), productionTTL)
	warmUp(b, impls, productionWarmUp)
	handoffCost(b, impls)
}

// handoffCost runs the turns of BenchmarkHandoffCost on impls and reports
// its metrics.
func handoffCost(b *testing.B, impls []contend.Impl) {
	var cpu, serverCPU, allocs, goroutines, runs, handoffs, logRate [2]float64
	for turn := range costTurns {
		for i := range impls[:2] {
			var m0, m1 runtime.MemStats
			g0, r0 := goroutinesCreated(), goroutineRuns()
			runtime.ReadMemStats(&m0)
			rs := contend.OneKey(b, impls[i:i+1], costClients, costTurnTime)
			runtime.ReadMemStats(&m1)
			g1, r1 := goroutinesCreated(), goroutineRuns()
			if turn == 0 {
				continue
			}
			// OneKey runs with both kinds of ctx: the turn's figures are
			// over both.
			var n, secs float64
			for _, r := range rs {
				cpu[i] += float64(r[0].ClientCPU) / float64(time.Microsecond)
				serverCPU[i] += float64(r[0].ServerCPU) / float64(time.Microsecond)
				n += float64(r[0].Acquisitions)
				secs += r[0].Elapsed.Seconds()
			}
			allocs[i] += float64(m1.Mallocs - m0.Mallocs)
			goroutines[i] += float64(g1 - g0)
			runs[i] += float64(r1 - r0)
			handoffs[i] += n
			logRate[i] += math.Log(n / secs)
		}
	}
	per := func(v [2]float64, i int) float64 { return v[i] / max(handoffs[i], 1) }
	for i := range 2 {
		b.ReportMetric(per(cpu, i), impls[i].Name+"-cpu-per-handoff-µs")
		b.ReportMetric(per(allocs, i), impls[i].Name+"-allocs-per-handoff")
		b.ReportMetric(per(goroutines, i), impls[i].Name+"-goroutines-per-handoff")
		b.ReportMetric(per(runs, i), impls[i].Name+"-runs-per-handoff")
	}
	b.ReportMetric(per(cpu, 0)/per(cpu, 1), "locker-cpu-x-zklock")
	if serverCPU[1] > 0 {
		b.ReportMetric(per(serverCPU, 0)/per(serverCPU, 1), "locker-server-cpu-x-zklock")
	}
	b.ReportMetric(per(allocs, 0)/per(allocs, 1), "locker-allocs-x-zklock")
	b.ReportMetric(math.Exp((logRate[0]-logRate[1])/(costTurns-1)), "locker-rate-x-zklock")
	b.ReportMetric(0, "ns/op")
}

// goroutineRuns is how many times this process's goroutines were scheduled
// to run after they were made runnable (a start or a wake-up each), in the
// sample the runtime's scheduling latencies count.
func goroutineRuns() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return n
}

// goroutinesCreated is how many goroutines this process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// BenchmarkHandoffProfile runs the clients of BenchmarkHandoffCost for one
// implementation only, on the test server (a sub-benchmark each:
// impl=locker, a Locker from New on a direct connection as in
// BenchmarkScenarios; impl=locker-open, one opened through the zk:// URL;
// impl=zklock), so that -cpuprofile, -memprofile and -trace show that
// implementation's hand-offs alone:
//
//	go test -c -o z.test ./integration/zookeeper/ && ./z.test -test.run '^$' \
//	    -test.bench 'HandoffProfile/impl=locker$' -test.cpuprofile locker.prof
//
// Each sub-benchmark runs contend.OneKey once, whatever b.N, and reports
// per hand-off (both kinds of ctx together) this process's CPU time
// (cpu-per-handoff-µs), heap allocations, goroutines started, goroutine
// runs (see goroutineRuns), and read and write system calls (reads- and
// writes-per-handoff, from /proc/self/io: counts that the load does not
// blur).
func BenchmarkHandoffProfile(b *testing.B) {
	srv := testenv.ZooKeeper(b)
	addr := srv.Servers()[0]
	impls := scenarioImpls(b, srv, func(b *testing.B) locker.Locker { return benchLocker(b, addr) }, testTTL)
	open := contend.Locker(urlLockers(b, srv, testTTL))
	open.Name = "locker-open"
	impls = []contend.Impl{impls[0], open, impls[1]}
	for _, impl := range impls {
		b.Run("impl="+impl.Name, func(b *testing.B) {
			var m0, m1 runtime.MemStats
			g0, r0 := goroutinesCreated(), goroutineRuns()
			io0 := ioCalls(b)
			runtime.ReadMemStats(&m0)
			rs := contend.OneKey(b, []contend.Impl{impl}, costClients, costTurnTime)
			runtime.ReadMemStats(&m1)
			io1 := ioCalls(b)
			g1, r1 := goroutinesCreated(), goroutineRuns()
			var n float64
			var cpu time.Duration
			for _, r := range rs {
				n += float64(r[0].Acquisitions)
				cpu += r[0].ClientCPU
			}
			n = max(n, 1)
			b.ReportMetric(float64(cpu)/float64(time.Microsecond)/n, "cpu-per-handoff-µs")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/n, "allocs-per-handoff")
			b.ReportMetric(float64(g1-g0)/n, "goroutines-per-handoff")
			b.ReportMetric(float64(r1-r0)/n, "runs-per-handoff")
			if io0 != nil && io1 != nil {
				b.ReportMetric(float64(io1["syscr"]-io0["syscr"])/n, "reads-per-handoff")
				b.ReportMetric(float64(io1["syscw"]-io0["syscw"])/n, "writes-per-handoff")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// ioCalls reads this process's I/O counters from /proc/self/io (syscr:
// read system calls, syscw: write system calls), or nil where there is
// none.
func ioCalls(b *testing.B) map[string]int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return nil
	}
	m := map[string]int64{}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("/proc/self/io: %q: %v", line, err)
		}
		m[k] = n
	}
	return m
}
