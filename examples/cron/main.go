// Command cron is the replicated-cron demo: a service with several replicas
// runs scheduled jobs ("close stale rooms", "rotate plan states") over a set
// of plans every second, and each plan's job must run on exactly one replica
// per tick.
//
// With no flags it starts a real etcd server inside this process (temporary
// directory, loopback only) as the store, then starts the replicas as
// separate OS processes (re-executing itself), each with its own client.
// Each replica calls locker.TryDo per job and plan from a bounded worker pool
// and skips what another replica holds. Partway through, one replica is
// killed with SIGKILL while it holds locks: its keys are taken over by the
// others once its TTL has run out, with higher fencing tokens. At the end the
// demo prints, per tick and plan, which replica ran the job and with which
// token, and exits non-zero if any job ran twice at once or twice in a tick.
//
//	go run ./examples/cron
//	go run ./examples/cron -store redis://127.0.0.1:6379 -replicas 3 -duration 20s
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/backends"
	"github.com/golocker/locker/internal/etcdserver"
)

// config is what the flags set.
type config struct {
	store    string
	replicas int
	duration time.Duration
	ttl      time.Duration
	plans    int
	workers  int
	killAt   time.Duration
	noKill   bool
	minHold  time.Duration
	skew     time.Duration

	replica int // >0: run as replica number replica (internal)
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.replica > 0 {
		err = runReplica(ctx, cfg, os.Stdout)
	} else {
		err = runDemo(ctx, cfg, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cron:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("cron", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&cfg.store, "store", "", "locker URL of the store, e.g. redis://127.0.0.1:6379, rediss://…,\nmysql://user:pass@127.0.0.1:3306/db, etcd://127.0.0.1:2379[,…],\nzk://127.0.0.1:2181[,…]; empty starts an embedded etcd")
	fs.IntVar(&cfg.replicas, "replicas", 5, "number of replica processes")
	fs.DurationVar(&cfg.duration, "duration", 12*time.Second, "how long the replicas run")
	fs.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "lock TTL: how long a killed replica's locks block its plans")
	fs.IntVar(&cfg.plans, "plans", 4, "number of plans; each has two jobs")
	fs.IntVar(&cfg.workers, "workers", 4, "worker pool size of each replica")
	fs.DurationVar(&cfg.killAt, "kill-after", 0, "when to SIGKILL a replica holding locks (default: a third of -duration)")
	fs.BoolVar(&cfg.noKill, "no-kill", false, "do not kill a replica")
	fs.DurationVar(&cfg.minHold, "minhold", 950*time.Millisecond, "locker.MinHold of every job: its key stays taken that long after it started (0: released when the job ends)")
	fs.DurationVar(&cfg.skew, "skew", 0, "replica i's scheduler fires (i-1)×skew late each tick, as skewed clocks and schedulers do")
	fs.IntVar(&cfg.replica, "replica", 0, "internal: run as this replica")
	fs.Usage = func() {
		fmt.Fprintf(out, `Usage: cron [flags]

The replicated-cron demo: -replicas processes run the jobs "close-rooms" and
"rotate-state" for -plans plans every second; locker.TryDo makes each job run
on exactly one replica per tick: each job is short, and locker.MinHold keeps
its key taken for nearly the whole tick, so that a replica whose scheduler
fires late (-skew) does not run it again; -minhold 0 shows the double runs
without it. One replica is killed with SIGKILL partway through; its plans
are taken over after -ttl with higher fencing tokens. The summary shows who
ran what, double runs (must be 0) and skipped ticks; the exit status is 1 if
any job ran twice at once or twice in one tick.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case cfg.replicas < 1 || cfg.replicas > 64:
		return cfg, usageErr(fs, "-replicas must be between 1 and 64")
	case cfg.duration < 2*time.Second:
		return cfg, usageErr(fs, "-duration must be at least 2s")
	case cfg.plans < 1 || cfg.workers < 1:
		return cfg, usageErr(fs, "-plans and -workers must be positive")
	case cfg.minHold < 0 || cfg.minHold >= time.Second:
		return cfg, usageErr(fs, "-minhold must be at least 0 and shorter than the 1s tick")
	case cfg.skew < 0 || time.Duration(max(cfg.replicas-1, 0))*cfg.skew >= time.Second:
		return cfg, usageErr(fs, "-skew times (replicas-1) must be at least 0 and shorter than the 1s tick")
	}
	if cfg.killAt <= 0 {
		cfg.killAt = cfg.duration / 3
	}
	return cfg, nil
}

func usageErr(fs *flag.FlagSet, msg string) error {
	fmt.Fprintln(fs.Output(), "cron:", msg)
	return errors.New(msg)
}

// event is one line a replica writes to its stdout.
type event struct {
	Kind    string `json:"kind"` // "start", "end", "skip", "ready"
	Replica int    `json:"replica"`
	Job     string `json:"job,omitempty"`
	Tick    int64  `json:"tick,omitempty"` // unix second of the tick
	Token   uint64 `json:"token,omitempty"`
	At      int64  `json:"at"` // unix nanoseconds
	Err     string `json:"err,omitempty"`
}

// jobs lists the job keys: one per job kind and plan, as in the seed's
// PlanCorn:<planId> keys.
func jobs(plans int) []string {
	var keys []string
	for p := 1; p <= plans; p++ {
		keys = append(keys, fmt.Sprintf("close-rooms:plan-%d", p), fmt.Sprintf("rotate-state:plan-%d", p))
	}
	return keys
}

// jobTime is how long a job works.
const jobTime = 20 * time.Millisecond

// runReplica is one replica: every second, (replica-1)×skew late, it tries
// every job with a bounded worker pool; locker.MinHold keeps a job's key
// taken for the rest of the tick after the job ended, so that no other
// replica runs it again in the same tick (ShedLock's lockAtLeastFor).
func runReplica(ctx context.Context, cfg config, stdout io.Writer) error {
	var mux locker.Mux
	if err := backends.Register(&mux); err != nil {
		return err
	}
	l, err := locker.Open(ctx, &mux, cfg.store, locker.WithTTL(cfg.ttl), locker.WithPrefix("cron-demo/"),
		locker.WithOwnerLabel(fmt.Sprintf("replica-%d", cfg.replica)))
	if err != nil {
		return err
	}
	defer l.Close()

	var outMu sync.Mutex
	enc := json.NewEncoder(stdout)
	emit := func(e event) {
		e.Replica = cfg.replica
		e.At = time.Now().UnixNano()
		outMu.Lock()
		defer outMu.Unlock()
		_ = enc.Encode(e)
	}
	emit(event{Kind: "ready"})

	end := time.Now().Add(cfg.duration)
	for {
		next := time.Now().Truncate(time.Second).Add(time.Second)
		if !next.Before(end) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next.Add(time.Duration(cfg.replica-1) * cfg.skew))):
		}
		tick := next.Unix()
		work := make(chan string)
		var wg sync.WaitGroup
		for w := 0; w < cfg.workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for job := range work {
					err := locker.TryDo(ctx, l, job, func(jctx context.Context) error {
						lk, err := l.TryLock(jctx, job) // reentrant: the hold Do took
						if err != nil {
							return err
						}
						defer lk.Unlock(jctx)
						emit(event{Kind: "start", Job: job, Tick: tick, Token: lk.Token()})
						select {
						case <-jctx.Done():
							return context.Cause(jctx)
						case <-time.After(jobTime):
						}
						emit(event{Kind: "end", Job: job, Tick: tick, Token: lk.Token()})
						return nil
					}, locker.MinHold(cfg.minHold))
					switch {
					case errors.Is(err, locker.ErrNotAcquired):
						emit(event{Kind: "skip", Job: job, Tick: tick})
					case err != nil:
						emit(event{Kind: "skip", Job: job, Tick: tick, Err: err.Error()})
					}
				}
			}()
		}
		order := jobs(cfg.plans)
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, job := range order {
			work <- job
		}
		close(work)
		wg.Wait()
	}
}

// runDemo starts the store (unless -store), the replicas, the kill, and
// prints the summary.
func runDemo(ctx context.Context, cfg config, stdout io.Writer) error {
	if cfg.store == "" {
		srv, err := etcdserver.Start(ctx, etcdserver.Config{})
		if err != nil {
			return fmt.Errorf("start embedded etcd: %w", err)
		}
		defer srv.Close()
		cfg.store = "etcd://" + strings.TrimPrefix(srv.Endpoint(), "http://")
		fmt.Fprintf(stdout, "store: embedded etcd at %s (in this process)\n", srv.Endpoint())
	} else {
		fmt.Fprintf(stdout, "store: %s\n", redactURL(cfg.store))
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}

	var mu sync.Mutex
	var events []event
	procs := make([]*exec.Cmd, cfg.replicas+1)
	var readers sync.WaitGroup
	ready := make(chan int, cfg.replicas)
	for r := 1; r <= cfg.replicas; r++ {
		cmd := exec.CommandContext(ctx, exe,
			"-replica", fmt.Sprint(r), "-store", cfg.store, "-ttl", cfg.ttl.String(),
			"-duration", cfg.duration.String(), "-plans", fmt.Sprint(cfg.plans), "-workers", fmt.Sprint(cfg.workers),
			"-minhold", cfg.minHold.String(), "-skew", cfg.skew.String())
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start replica %d: %w", r, err)
		}
		procs[r] = cmd
		readers.Add(1)
		go func() {
			defer readers.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var e event
				if json.Unmarshal(sc.Bytes(), &e) != nil {
					continue
				}
				if e.Kind == "ready" {
					ready <- e.Replica
					continue
				}
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}
		}()
	}
	fmt.Fprintf(stdout, "replicas: %d processes, TTL %v, %d jobs per tick, running %v\n", cfg.replicas, cfg.ttl, 2*cfg.plans, cfg.duration)
	for i := 0; i < cfg.replicas; i++ {
		select {
		case <-ready:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return errors.New("replicas did not start within 30s")
		}
	}

	killed, killedAt, killedHeld := 0, int64(0), map[string]uint64{}
	if !cfg.noKill && cfg.replicas > 1 {
		select {
		case <-time.After(cfg.killAt):
		case <-ctx.Done():
			return ctx.Err()
		}
		// Kill the replica that holds the most locks right now.
		for deadline := time.Now().Add(3 * time.Second); killed == 0 && time.Now().Before(deadline); {
			mu.Lock()
			held := holding(events)
			mu.Unlock()
			best := 0
			for r, jobs := range held {
				if best == 0 || len(jobs) > len(held[best]) {
					best = r
				}
			}
			if best != 0 {
				_ = procs[best].Process.Signal(syscall.SIGKILL)
				killed, killedAt, killedHeld = best, time.Now().UnixNano(), held[best]
				fmt.Fprintf(stdout, "killed replica %d with SIGKILL while it held %d locks\n", best, len(held[best]))
			} else {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	for r := 1; r <= cfg.replicas; r++ {
		err := procs[r].Wait()
		if r != killed && err != nil {
			return fmt.Errorf("replica %d: %w", r, err)
		}
	}
	readers.Wait()
	res := summarize(events, cfg, killed, killedAt, killedHeld)
	res.print(stdout, cfg)
	if res.doubleRuns > 0 {
		return fmt.Errorf("%d double runs", res.doubleRuns)
	}
	return nil
}

// holding returns, per replica, the jobs it has started and not ended, with
// their tokens.
func holding(events []event) map[int]map[string]uint64 {
	held := map[int]map[string]uint64{}
	for _, e := range events {
		switch e.Kind {
		case "start":
			if held[e.Replica] == nil {
				held[e.Replica] = map[string]uint64{}
			}
			held[e.Replica][e.Job] = e.Token
		case "end":
			delete(held[e.Replica], e.Job)
		}
	}
	for r, jobs := range held {
		if len(jobs) == 0 {
			delete(held, r)
		}
	}
	return held
}

// run is one execution of a job.
type run struct {
	replica    int
	token      uint64
	start, end int64 // end = kill time for the killed replica's open runs
}

type result struct {
	ticks      []int64
	jobs       []string
	runs       map[string]map[int64][]run // job → tick → runs
	doubleRuns int
	skipped    int
	overlaps   []string
	takeovers  []string
}

func summarize(events []event, cfg config, killed int, killedAt int64, killedHeld map[string]uint64) result {
	res := result{jobs: jobs(cfg.plans), runs: map[string]map[int64][]run{}}
	open := map[string]map[int]*run{}
	tickSet := map[int64]bool{}
	var all []*run
	jobOf := map[*run]string{}
	for _, e := range events {
		if e.Tick != 0 {
			tickSet[e.Tick] = true
		}
		switch e.Kind {
		case "start":
			r := &run{replica: e.Replica, token: e.Token, start: e.At, end: -1}
			if open[e.Job] == nil {
				open[e.Job] = map[int]*run{}
			}
			open[e.Job][e.Replica] = r
			all = append(all, r)
			jobOf[r] = e.Job
			if res.runs[e.Job] == nil {
				res.runs[e.Job] = map[int64][]run{}
			}
		case "end":
			if r := open[e.Job][e.Replica]; r != nil {
				r.end = e.At
				delete(open[e.Job], e.Replica)
			}
		}
	}
	for _, r := range all {
		if r.end < 0 {
			r.end = killedAt // the killed replica's runs end at the kill
			if r.replica != killed {
				r.end = time.Now().UnixNano()
			}
		}
	}
	// Index by tick using the start events again (runs are in order).
	i := 0
	for _, e := range events {
		if e.Kind == "start" {
			r := all[i]
			i++
			res.runs[e.Job][e.Tick] = append(res.runs[e.Job][e.Tick], *r)
		}
	}
	for t := range tickSet {
		res.ticks = append(res.ticks, t)
	}
	sort.Slice(res.ticks, func(a, b int) bool { return res.ticks[a] < res.ticks[b] })

	// Double runs: two runs of one job in one tick, or overlapping in time.
	for _, job := range res.jobs {
		var rs []*run
		for _, r := range all {
			if jobOf[r] == job {
				rs = append(rs, r)
			}
		}
		for a := 0; a < len(rs); a++ {
			for b := a + 1; b < len(rs); b++ {
				if rs[a].start < rs[b].end && rs[b].start < rs[a].end {
					res.doubleRuns++
					res.overlaps = append(res.overlaps, fmt.Sprintf("%s: replica %d (token %d) and replica %d (token %d) ran at the same time", job, rs[a].replica, rs[a].token, rs[b].replica, rs[b].token))
				}
			}
		}
		var last uint64
		for _, t := range res.ticks {
			n := len(res.runs[job][t])
			if n > 1 {
				res.doubleRuns += n - 1
				res.overlaps = append(res.overlaps, fmt.Sprintf("%s: %d runs in tick %d", job, n, t))
			}
			if n == 0 {
				res.skipped++
			}
			for _, r := range res.runs[job][t] {
				if r.token <= last {
					res.overlaps = append(res.overlaps, fmt.Sprintf("%s: token %d after %d", job, r.token, last))
					res.doubleRuns++
				}
				last = r.token
			}
		}
		if tok, ok := killedHeld[job]; ok {
			for _, t := range res.ticks {
				for _, r := range res.runs[job][t] {
					if r.start > killedAt {
						res.takeovers = append(res.takeovers, fmt.Sprintf("%s: held by killed replica %d (token %d), taken over by replica %d with token %d after %.1fs", job, killed, tok, r.replica, r.token, float64(r.start-killedAt)/1e9))
						goto next
					}
				}
			}
			res.takeovers = append(res.takeovers, fmt.Sprintf("%s: held by killed replica %d (token %d), not taken over before the end", job, killed, tok))
		next:
		}
	}
	return res
}

func (res result) print(w io.Writer, cfg config) {
	first := int64(0)
	if len(res.ticks) > 0 {
		first = res.ticks[0]
	}
	cell := func(job string, t int64) string {
		var parts []string
		for _, r := range res.runs[job][t] {
			parts = append(parts, fmt.Sprintf("r%d#%d", r.replica, r.token))
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, ",")
	}
	width := 10
	for _, job := range res.jobs {
		for _, t := range res.ticks {
			width = max(width, len(cell(job, t)))
		}
	}
	fmt.Fprintf(w, "\n%-6s", "tick")
	for _, job := range res.jobs {
		fmt.Fprintf(w, " %-*s", width, shortJob(job))
	}
	fmt.Fprintln(w)
	for _, t := range res.ticks {
		fmt.Fprintf(w, "%-6s", fmt.Sprintf("+%ds", t-first))
		for _, job := range res.jobs {
			fmt.Fprintf(w, " %-*s", width, cell(job, t))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "\n(rN#T: replica N ran the job with fencing token T; -: skipped, the key was held by a dead replica)")
	for _, s := range res.takeovers {
		fmt.Fprintln(w, "takeover:", s)
	}
	for _, s := range res.overlaps {
		fmt.Fprintln(w, "DOUBLE RUN:", s)
	}
	fmt.Fprintf(w, "\ndouble runs: %d\nskipped job-ticks: %d\nruns: %d\n", res.doubleRuns, res.skipped, res.count())
}

func (res result) count() int {
	n := 0
	for _, byTick := range res.runs {
		for _, rs := range byTick {
			n += len(rs)
		}
	}
	return n
}

// shortJob abbreviates "close-rooms:plan-1" to "close/p1".
func shortJob(job string) string {
	kind, plan, _ := strings.Cut(job, ":plan-")
	kind, _, _ = strings.Cut(kind, "-")
	return kind + "/p" + plan
}

func redactURL(s string) string {
	if i := strings.Index(s, "@"); i > 0 {
		if j := strings.Index(s, "://"); j > 0 && j < i {
			return s[:j+3] + "…" + s[i:]
		}
	}
	return s
}
