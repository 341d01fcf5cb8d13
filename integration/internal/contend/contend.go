// Package contend runs the same lock scenarios against several lock
// implementations on one store, in one benchmark run, and reports each
// one's figures and its ratios to the others': this library, the raw floor
// (the least a hand-written lock on the store costs) and the best peer
// library for that store.
//
// The scenarios:
//
//   - OneKey: N clients (each with its own client connection or Locker) loop
//     Lock → read-modify-write of a shared counter → Unlock on one key for a
//     fixed time; hand-offs/s, per-client min/max acquisitions, wait
//     p50/p99/max, and no lost update (the benchmark fails on one).
//   - ManyKeys: N clients, each on a key of its own; Lock+Unlock/s.
//   - Uncontended: one client's Lock+Unlock, the implementations
//     interleaved so that the machine's load weighs on all alike.
//   - Handoff: B waits 10–30 ms for a key A holds, A unlocks; the time from
//     A's Unlock call to B's Lock returning.
//   - MultiKey: OneKey with the three keys of MultiKeys taken together
//     (LockerMulti; a peer's multi-key lock).
//
// Every scenario runs each implementation twice, every client of both given
// the same ctx: context.Background(), a ctx that never ends (what a cron job
// passes), and a cancellable one. A Locker may call the store inline for
// the first kind and must stay ready to return early for the second. The
// first kind's figures have the names below; the second's end in
// "-cancellable" ("fair-x-fenced-cancellable").
//
// Every figure is reported with b.ReportMetric, named after the
// implementation ("locker-handoffs/s", "peer-wait-p99-ms", …), and every
// ratio as "<name>-x-<other>": the first implementation's to each other's,
// and each implementation's to the reference (Impl.Reference), when there
// is one. OneKey at 64 clients also reports "<name>-x-4-clients", its
// hand-offs/s over those at 4. Timings are never asserted: only lost
// updates and errors fail a benchmark.
//
// OneKey and ManyKeys also report what an acquisition (with its release)
// cost in CPU: "<name>-client-cpu-µs" is this process's CPU time over the
// implementation's turns (its clients, the Go runtime, and an in-process
// server such as embedded etcd), "<name>-server-cpu-µs" the store server's
// when the Impl can read it (Impl.ServerCPU): they say where a difference
// in rate comes from. "<name>-server-calls" and "<name>-scripts" count the
// store's commands per acquisition, those run by scripts included, and the
// scripts among them, and "<name>-script-µs" is the server's time per
// script, when the Impl can read them (Impl.ServerCalls).
// "<name>-messages" counts the notifications the server sent per
// acquisition (Redis: PUBLISH, whose every message wakes a subscriber):
// the wake-ups a lock's waiters cost beside their attempts.
//
// OneKey reports "<name>-again": the share of the acquisitions that went
// to the client that had held the key last, without a hand-off to another
// client. A lock that lets its releaser take the key again at once (a
// retry loop) makes most of its acquisitions so; a fair one, none while
// others wait. It says how much of a difference in rate is hand-offs.
package contend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ctxKind is a kind of ctx the clients are given, and the suffix of its
// metrics.
type ctxKind struct {
	// cancellable: a ctx that can end, else context.Background()
	cancellable bool
	suffix      string
}

// ctxKinds are the kinds every scenario runs with: see the package doc.
var ctxKinds = [...]ctxKind{{false, ""}, {true, "-cancellable"}}

// ctx returns a ctx of kind k, derived from parent when it is cancellable.
func (k ctxKind) ctx(parent context.Context) context.Context {
	if k.cancellable {
		return parent
	}
	return context.Background()
}

// Mutex is one client's lock on one key.
type Mutex interface {
	// Lock waits for the key and returns the function that releases it.
	Lock(ctx context.Context) (unlock func(ctx context.Context) error, err error)
}

// Impl is one lock implementation on the store under test.
type Impl struct {
	// Name labels its metrics: "locker", "floor", or the peer's name.
	Name string
	// New returns a Mutex on key for a client of its own (its own
	// connection, session or Locker), standing for another process.
	New func(b *testing.B, key string) Mutex
	// ServerCPU, when not nil, returns the CPU time the store's server
	// has used so far (Redis: INFO cpu).
	ServerCPU func(ctx context.Context) (time.Duration, error)
	// ServerCalls, when not nil, returns what the store's server has run
	// so far (Redis: INFO commandstats).
	ServerCalls func(ctx context.Context) (Calls, error)
	// Reference, when set, makes every other implementation report its
	// ratios to this one ("<name>-x-<reference>", and for CPU
	// "<name>-client-cpu-x-<reference>"). At most one Impl sets it.
	Reference bool
}

// Result is what OneKey or ManyKeys measured for one implementation.
type Result struct {
	Acquisitions int
	Elapsed      time.Duration
	MinPer       int // fewest acquisitions of one client
	MaxPer       int // most acquisitions of one client
	WaitP50      time.Duration
	WaitP99      time.Duration
	WaitMax      time.Duration // the longest wait
	Again        int           // acquisitions by the client that had held the key last (OneKey)
	Losses       int           // Unlocks that found the lock gone as the contract allows
	FirstLoss    error         // the first of them, or nil
	ClientCPU    time.Duration // this process's CPU time over the turns; 0: unknown
	ServerCPU    time.Duration // the server's; 0: unknown (no Impl.ServerCPU)
	Calls        Calls         // the server's; zero: unknown (no Impl.ServerCalls)
}

// Calls counts what a store's server ran.
type Calls struct {
	Commands   int64         // commands, those that scripts called included
	Scripts    int64         // the scripts among Commands
	ScriptTime time.Duration // the time the server spent running the scripts
	Messages   int64         // notifications sent among Commands (Redis: PUBLISH)
}

func (c Calls) add(d Calls) Calls {
	return Calls{c.Commands + d.Commands, c.Scripts + d.Scripts, c.ScriptTime + d.ScriptTime, c.Messages + d.Messages}
}

func (c Calls) sub(d Calls) Calls {
	return c.add(Calls{-d.Commands, -d.Scripts, -d.ScriptTime, -d.Messages})
}

// Rate is acquisitions per second.
func (r Result) Rate() float64 { return float64(r.Acquisitions) / r.Elapsed.Seconds() }

// AgainShare is the share of the acquisitions that went to the client
// that had held the key last (Again), 0 to 1.
func (r Result) AgainShare() float64 { return float64(r.Again) / float64(max(r.Acquisitions, 1)) }

// Fairness is the fewest acquisitions of a client over the most (1 is even).
func (r Result) Fairness() float64 { return float64(r.MinPer) / float64(max(r.MaxPer, 1)) }

// Keys makes a key for a run, unique across runs and implementations.
func Keys(b *testing.B, impl, scenario string) string {
	return fmt.Sprintf("contend-%s-%s-%d", impl, scenario, time.Now().UnixNano())
}

// clients makes n clients of impl; key(i) is client i's key.
func clients(b *testing.B, impl Impl, n int, key func(i int) string) []Mutex {
	ms := make([]Mutex, n)
	for i := range ms {
		ms[i] = impl.New(b, key(i))
	}
	return ms
}

// tally accumulates the rounds of one implementation.
type tally struct {
	counts    []int
	waits     []time.Duration
	elapsed   time.Duration
	clientCPU time.Duration
	serverCPU time.Duration
	calls     Calls
	again     int
	losses    int
	firstLoss error
}

func (t *tally) result() Result {
	slices.Sort(t.waits)
	return Result{
		Acquisitions: t.acquisitions(), Elapsed: t.elapsed,
		MinPer: slices.Min(t.counts), MaxPer: slices.Max(t.counts),
		WaitP50: pct(t.waits, 0.50), WaitP99: pct(t.waits, 0.99), WaitMax: pct(t.waits, 1),
		ClientCPU: t.clientCPU, ServerCPU: t.serverCPU,
		Calls: t.calls, Again: t.again, Losses: t.losses, FirstLoss: t.firstLoss,
	}
}

// run has the clients ms of impl loop on their keys for d, with ctxs of
// kind k, and adds what they did to t (nil: a warm-up, not counted). With
// shared set, the clients read-modify-write one counter under the lock and
// a lost update fails b.
func run(b *testing.B, impl Impl, ms []Mutex, d time.Duration, shared bool, k ctxKind, t *tally) {
	b.Helper()
	runWindow(b, impl, ms, 0, d, shared, k, t)
}

// runWindow is run with the clients looping for warm+d, and with warm > 0
// only their window counted: the acquisitions whose Lock returned in the
// d after warm, the CPU and calls from its start to its end, and d as its
// elapsed time. Neither the clients' first, simultaneous attempts nor
// their last ones, which wait out the queue after the end, are counted.
// With warm 0 it counts the whole run, the last acquisitions and their
// time included.
func runWindow(b *testing.B, impl Impl, ms []Mutex, warm, d time.Duration, shared bool, k ctxKind, t *tally) {
	b.Helper()
	n := len(ms)
	ctx, cancel := context.WithTimeout(b.Context(), d+time.Minute)
	defer cancel()
	cctx := k.ctx(ctx)
	var (
		counter   atomic.Int64
		last      atomic.Int64 // the client that took the key last, with shared
		again     atomic.Int64 // acquisitions by that client, with shared
		wg        sync.WaitGroup
		mu        sync.Mutex
		firstErr  error
		losses    int
		firstLoss error
	)
	counts := make([]int, n)
	waits := make([][]time.Duration, n)
	serverCPU := func() time.Duration {
		if impl.ServerCPU == nil || t == nil {
			return 0
		}
		d, err := impl.ServerCPU(ctx)
		if err != nil {
			b.Fatalf("%s: the server's CPU time: %v", impl.Name, err)
		}
		return d
	}
	serverCalls := func() Calls {
		if impl.ServerCalls == nil || t == nil {
			return Calls{}
		}
		c, err := impl.ServerCalls(ctx)
		if err != nil {
			b.Fatalf("%s: the server's command counts: %v", impl.Name, err)
		}
		return c
	}
	var (
		calls0           Calls
		server0, client0 time.Duration
	)
	sample := func() (Calls, time.Duration, time.Duration) {
		return serverCalls(), serverCPU(), processCPU()
	}
	if warm == 0 {
		calls0, server0, client0 = sample()
	}
	last.Store(-1)
	start := time.Now()
	from := start.Add(warm)
	stop := from.Add(d)
	var all atomic.Int64 // acquisitions, the uncounted ones included
	for i := range n {
		wg.Go(func() {
			for time.Now().Before(stop) {
				t0 := time.Now()
				unlock, err := ms[i].Lock(cctx)
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, fmt.Errorf("%s client %d: lock: %w", impl.Name, i, err))
					mu.Unlock()
					return
				}
				at := time.Now()
				counted := warm == 0 || !at.Before(from) && at.Before(stop)
				all.Add(1)
				if counted {
					waits[i] = append(waits[i], at.Sub(t0))
				}
				if shared {
					if last.Swap(int64(i)) == int64(i) && counted {
						again.Add(1)
					}
					v := counter.Load()
					runtime.Gosched() // a read-yield-write that overlapping holders would lose
					counter.Store(v + 1)
				}
				if counted {
					counts[i]++
				}
				if err := unlock(cctx); errors.Is(err, ErrAllowedLoss) {
					mu.Lock()
					losses++
					firstLoss = cmpOr(firstLoss, fmt.Errorf("%s client %d: unlock: %w", impl.Name, i, err))
					mu.Unlock()
				} else if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, fmt.Errorf("%s client %d: unlock: %w", impl.Name, i, err))
					mu.Unlock()
					return
				}
			}
		})
	}
	var (
		elapsed        time.Duration
		calls          Calls
		server, client time.Duration
	)
	if warm > 0 {
		time.Sleep(time.Until(from))
		calls0, server0, client0 = sample()
		time.Sleep(time.Until(stop))
		calls, server, client = sample()
		elapsed = d
		wg.Wait()
	} else {
		wg.Wait()
		elapsed = time.Since(start)
		calls, server, client = sample()
	}
	client, server = client-client0, server-server0
	calls = calls.sub(calls0)
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	if total := all.Load(); shared && counter.Load() != total {
		b.Fatalf("%s: %d acquisitions left the counter at %d: %d updates were lost to overlapping holders", impl.Name, total, counter.Load(), total-counter.Load())
	}
	if t == nil {
		return
	}
	if t.counts == nil {
		t.counts = make([]int, n)
	}
	for i, c := range counts {
		t.counts[i] += c
	}
	t.waits = append(t.waits, slices.Concat(waits...)...)
	t.elapsed += elapsed
	t.clientCPU += client
	t.serverCPU += server
	t.calls = t.calls.add(calls)
	t.again += int(again.Load())
	t.losses += losses
	t.firstLoss = cmpOr(t.firstLoss, firstLoss)
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// perAcquisition is d per acquisition of r, in microseconds.
func perAcquisition(d time.Duration, r Result) float64 {
	return float64(d) / float64(time.Microsecond) / float64(max(r.Acquisitions, 1))
}

// report reports each implementation's figures and the first one's ratios
// to each other's, for the runs with ctxs of kind k.
//
// With windows (from alternatePaired: each implementation's rates in the
// windows of each pair, windows[impl][pair]), a ratio of rates is the
// median of the pairs' ratios, and its quartiles are reported beside it
// ("<name>-x-<other>-q1", "-q3"); with nil, it is the ratio of the rates
// over all turns.
func report(b *testing.B, impls []Impl, rs []Result, unit string, k ctxKind, windows [][]float64) {
	metric := func(v float64, name string) { b.ReportMetric(v, name+k.suffix) }
	for i, r := range rs {
		n := impls[i].Name
		metric(r.Rate(), n+"-"+unit)
		metric(r.Fairness(), n+"-min/max")
		metric(ms(r.WaitP50), n+"-wait-p50-ms")
		metric(ms(r.WaitP99), n+"-wait-p99-ms")
		metric(ms(r.WaitMax), n+"-wait-max-ms")
		cpu := ""
		if r.ClientCPU > 0 {
			metric(perAcquisition(r.ClientCPU, r), n+"-client-cpu-µs")
			cpu = fmt.Sprintf(", CPU per acquisition %.1f µs here", perAcquisition(r.ClientCPU, r))
		}
		if r.ServerCPU > 0 {
			metric(perAcquisition(r.ServerCPU, r), n+"-server-cpu-µs")
			cpu += fmt.Sprintf(", %.1f µs in the server", perAcquisition(r.ServerCPU, r))
		}
		if c := r.Calls; c.Commands > 0 {
			per := func(n int64) float64 { return float64(n) / float64(max(r.Acquisitions, 1)) }
			metric(per(c.Commands), n+"-server-calls")
			metric(per(c.Scripts), n+"-scripts")
			metric(per(c.Messages), n+"-messages")
			cpu += fmt.Sprintf(", %.1f commands (%.2f scripts, %.2f messages", per(c.Commands), per(c.Scripts), per(c.Messages))
			if c.Scripts > 0 {
				us := float64(c.ScriptTime) / float64(time.Microsecond) / float64(c.Scripts)
				metric(us, n+"-script-µs")
				cpu += fmt.Sprintf(", %.1f µs each", us)
			}
			cpu += ")"
		}
		b.Logf("%-8s%-12s %8.0f %s, per client %d–%d, wait p50 %v p99 %v max %v%s", n, k.suffix, r.Rate(), unit, r.MinPer, r.MaxPer, r.WaitP50.Round(time.Microsecond), r.WaitP99.Round(time.Microsecond), r.WaitMax.Round(time.Microsecond), cpu)
		if r.Losses > 0 {
			// Reported only when there are any: a run without a stall
			// keeps the figures it always had.
			metric(float64(r.Losses), n+"-losses")
			b.Logf("%-8s%-12s %d locks lost as the contract allows; the first: %v", n, k.suffix, r.Losses, r.FirstLoss)
		}
	}
	if windows == nil {
		ratios(b, impls, func(i, j int) float64 { return rs[i].Rate() / rs[j].Rate() }, "", k.suffix)
	} else {
		pairedRatios(b, impls, windows, k.suffix)
	}
	if rs[0].ClientCPU > 0 {
		ratios(b, impls, func(i, j int) float64 {
			return perAcquisition(rs[i].ClientCPU, rs[i]) / perAcquisition(rs[j].ClientCPU, rs[j])
		}, "client-cpu-", k.suffix)
	}
	b.ReportMetric(0, "ns/op")
}

// ratios reports ratio(i, j) as "<impls[i]>-<what>x-<impls[j]><suffix>"
// for the first implementation against each other one, and for each one
// against the reference (Impl.Reference) when there is one.
func ratios(b *testing.B, impls []Impl, ratio func(i, j int) float64, what, suffix string) {
	ref := slices.IndexFunc(impls, func(impl Impl) bool { return impl.Reference })
	for i := range impls {
		for j := range impls {
			if i != j && (i == 0 || j == ref) {
				b.ReportMetric(ratio(i, j), impls[i].Name+"-"+what+"x-"+impls[j].Name+suffix)
			}
		}
	}
}

// OneKey runs the one-key scenario for each implementation in turn, clients
// at a time, for d each per ctx kind, and reports them side by side. The
// scenario runs once whatever b.N. It returns the results per ctx kind
// (ctxKinds).
func OneKey(b *testing.B, impls []Impl, n int, d time.Duration) [len(ctxKinds)][]Result {
	return oneKey(b, impls, n, d, 0)
}

// oneKey is OneKey, its turns paired windows when pairs > 0 (see
// ScenariosPaired).
func oneKey(b *testing.B, impls []Impl, n int, d time.Duration, pairs int) [len(ctxKinds)][]Result {
	rs, ws := alternate(b, impls, n, d, func(impl Impl) func(int) string {
		key := Keys(b, impl.Name, "onekey")
		return func(int) string { return key }
	}, true, pairs)
	for k, kind := range ctxKinds {
		report(b, impls, rs[k], "handoffs/s", kind, ws[k])
		for i, r := range rs[k] {
			b.ReportMetric(r.AgainShare(), impls[i].Name+"-again"+kind.suffix)
		}
	}
	return rs
}

// ManyKeys runs n clients on a key each, for d per implementation and ctx
// kind.
func ManyKeys(b *testing.B, impls []Impl, n int, d time.Duration) [len(ctxKinds)][]Result {
	return manyKeys(b, impls, n, d, 0)
}

// manyKeys is ManyKeys, its turns paired windows when pairs > 0.
func manyKeys(b *testing.B, impls []Impl, n int, d time.Duration, pairs int) [len(ctxKinds)][]Result {
	rs, ws := alternate(b, impls, n, d, func(impl Impl) func(int) string {
		key := Keys(b, impl.Name, "manykeys")
		return func(c int) string { return fmt.Sprintf("%s-%d", key, c) }
	}, false, pairs)
	for k, kind := range ctxKinds {
		report(b, impls, rs[k], "ops/s", kind, ws[k])
	}
	return rs
}

// rounds is how many turns the implementations take: they alternate, so
// that the machine's load and the server's warm-up (a JVM's JIT, caches)
// weigh on all alike.
const rounds = 3

// alternate warms each implementation's n clients up, then runs them in
// turns for d in all per implementation and ctx kind. Each counted turn
// follows a short uncounted one with the same kind of ctx: a Locker that
// made its calls inline for the other kind has let its workers go, which a
// caller that always passes one kind never sees.
//
// With pairs > 0 the turns are pairs windows instead (alternatePaired),
// and it also returns each implementation's rate in each window, per ctx
// kind; with 0, those are nil.
func alternate(b *testing.B, impls []Impl, n int, d time.Duration, keys func(Impl) func(int) string, shared bool, pairs int) ([len(ctxKinds)][]Result, [len(ctxKinds)][][]float64) {
	cs := make([][]Mutex, len(impls))
	for i, impl := range impls {
		cs[i] = clients(b, impl, n, keys(impl))
		run(b, impl, cs[i], d/10, shared, ctxKinds[0], nil)
	}
	var ts [len(ctxKinds)][]tally
	for k := range ts {
		ts[k] = make([]tally, len(impls))
	}
	var ws [len(ctxKinds)][][]float64
	if pairs > 0 {
		ws = alternatePaired(b, impls, cs, d, shared, pairs, &ts)
	} else {
		for range rounds {
			for i, impl := range impls {
				for k, kind := range ctxKinds {
					run(b, impl, cs[i], d/rounds/10, shared, kind, nil)
					run(b, impl, cs[i], d/rounds, shared, kind, &ts[k][i])
				}
			}
		}
	}
	var rs [len(ctxKinds)][]Result
	for k := range ts {
		rs[k] = make([]Result, len(impls))
		for i := range ts[k] {
			rs[k][i] = ts[k][i].result()
		}
	}
	return rs, ws
}

// Uncontended times one client's Lock+Unlock of each implementation, the
// implementations interleaved in each round; each of b.N iterations runs
// uncontendedBlock rounds with each kind of ctx in turn, so that even
// -benchtime 1x gives every kind a median of several rounds. It reports
// the medians and the first one's ratios to the others'. Turns of several rounds: a Locker's
// detached call right after inline ones finds its worker cold, which a
// caller that always passes one kind never does.
func Uncontended(b *testing.B, impls []Impl) {
	ms := make([]Mutex, len(impls))
	for i, impl := range impls {
		ms[i] = impl.New(b, Keys(b, impl.Name, "uncontended"))
	}
	once := func(ctx context.Context, m Mutex) time.Duration {
		t0 := time.Now()
		unlock, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := unlock(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	for range 20 { // warm connections and script caches
		for _, m := range ms {
			once(b.Context(), m)
		}
	}
	var times [len(ctxKinds)][][]time.Duration
	for k := range times {
		times[k] = make([][]time.Duration, len(impls))
	}
	for b.Loop() {
		for k, kind := range ctxKinds {
			ctx := kind.ctx(b.Context())
			for range uncontendedBlock {
				for i, m := range ms {
					times[k][i] = append(times[k][i], once(ctx, m))
				}
			}
		}
	}
	for k, kind := range ctxKinds {
		p50 := make([]time.Duration, len(impls))
		for i := range impls {
			slices.Sort(times[k][i])
			p50[i] = pct(times[k][i], 0.5)
			b.ReportMetric(float64(p50[i].Microseconds()), impls[i].Name+"-p50-µs"+kind.suffix)
		}
		ratios(b, impls, func(i, j int) float64 { return float64(p50[i]) / float64(max(p50[j], 1)) }, "", kind.suffix)
	}
}

// uncontendedBlock is how many rounds of Uncontended in a row use one kind
// of ctx, in each iteration.
const uncontendedBlock = 20

// Handoff measures, rounds times per implementation and ctx kind, the time
// from the holder's Unlock call to the return of the Lock a second client
// has been waiting in for 10–30 ms, and reports p50/p99 and the first one's
// p50 ratios to the others'. The ctx kinds alternate round by round.
func Handoff(b *testing.B, impls []Impl, rounds int) {
	var p50 [len(ctxKinds)][]time.Duration
	for k := range p50 {
		p50[k] = make([]time.Duration, len(impls))
	}
	for i, impl := range impls {
		key := Keys(b, impl.Name, "handoff")
		a, w := impl.New(b, key), impl.New(b, key)
		var lats [len(ctxKinds)][]time.Duration
		for range rounds {
			for k, kind := range ctxKinds {
				lats[k] = append(lats[k], handoff(b, a, w, kind.ctx(b.Context())))
			}
		}
		for k, kind := range ctxKinds {
			slices.Sort(lats[k])
			p50[k][i] = pct(lats[k], 0.5)
			b.ReportMetric(ms(p50[k][i]), impl.Name+"-handoff-p50-ms"+kind.suffix)
			b.ReportMetric(ms(pct(lats[k], 0.99)), impl.Name+"-handoff-p99-ms"+kind.suffix)
		}
	}
	for k, kind := range ctxKinds {
		ratios(b, impls, func(i, j int) float64 { return float64(p50[k][i]) / float64(max(p50[k][j], 1)) }, "", kind.suffix)
	}
	b.ReportMetric(0, "ns/op")
}

// handoff times one hand-off from a to w, both called with ctx.
func handoff(b *testing.B, a, w Mutex, ctx context.Context) time.Duration {
	unlockA, err := a.Lock(ctx)
	if err != nil {
		b.Fatal(err)
	}
	type got struct {
		unlock func(context.Context) error
		at     time.Time
		err    error
	}
	ch := make(chan got, 1)
	go func() {
		unlock, err := w.Lock(ctx)
		ch <- got{unlock, time.Now(), err}
	}()
	time.Sleep(10*time.Millisecond + rand.N(20*time.Millisecond))
	released := time.Now()
	if err := unlockA(ctx); err != nil {
		b.Fatal(err)
	}
	g := <-ch
	if g.err != nil {
		b.Fatal(g.err)
	}
	if err := g.unlock(ctx); err != nil {
		b.Fatal(err)
	}
	return g.at.Sub(released)
}

// Scenarios runs every scenario as sub-benchmarks of b: OneKey at 4, 16 and
// 64 clients (at 64 with each implementation's hand-offs/s over its
// 4-client figure, "<name>-x-4-clients": the "does not fall as waiters
// grow" target), ManyKeys at 16, Uncontended and Handoff. d is each
// contended run's length, per ctx kind.
func Scenarios(b *testing.B, impls []Impl, d time.Duration) {
	scenarios(b, impls, d, 0)
}

// scenarios is Scenarios, the contended turns paired windows when
// pairs > 0 (ScenariosPaired).
func scenarios(b *testing.B, impls []Impl, d time.Duration, pairs int) {
	var by = map[int][len(ctxKinds)][]Result{}
	for _, n := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("OneKey/clients=%d", n), func(b *testing.B) {
			by[n] = oneKey(b, impls, n, d, pairs)
			if n != 64 || len(by[4][0]) != len(impls) {
				return
			}
			for k, kind := range ctxKinds {
				for i, impl := range impls {
					b.ReportMetric(by[64][k][i].Rate()/by[4][k][i].Rate(), impl.Name+"-x-4-clients"+kind.suffix)
				}
			}
		})
	}
	b.Run("ManyKeys/clients=16", func(b *testing.B) { manyKeys(b, impls, 16, d, pairs) })
	b.Run("Uncontended", func(b *testing.B) { Uncontended(b, impls) })
	b.Run("Handoff", func(b *testing.B) { Handoff(b, impls, 50) })
}

// processCPU is ProcessCPU, 0 when the system does not say: the client CPU
// figures are then not reported.
func processCPU() time.Duration {
	d, _ := ProcessCPU()
	return d
}
