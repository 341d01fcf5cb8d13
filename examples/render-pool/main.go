// Command render-pool is the semaphore demo: worker processes render
// reports, and at most 4 renders run at once, store-wide, under a
// locker.Semaphore of 4 permits.
//
// With no flags it starts a real etcd server inside this process (temporary
// directory, loopback only) as the store, then starts the workers as
// separate OS processes (re-executing itself), each with its own client.
// Each worker takes a permit with Semaphore.Acquire, renders for a moment,
// and gives it back, in a loop. Partway through, a worker holding a permit is
// killed with SIGKILL: its permit stays taken until its TTL runs out in the
// store, then another worker gets it. At the end the demo prints the number
// of concurrent holders over time, and exits non-zero if it ever exceeded
// the limit or if the killed worker's permit never came back.
//
//	go run ./examples/render-pool
//	go run ./examples/render-pool -store redis://127.0.0.1:6379 -workers 8
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
	"slices"
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
	workers  int
	limit    int
	duration time.Duration
	ttl      time.Duration
	killAt   time.Duration
	render   time.Duration

	worker int // >0: run as worker number worker (internal)
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
	if cfg.worker > 0 {
		err = runWorker(ctx, cfg, os.Stdout)
	} else {
		err = runDemo(ctx, cfg, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "render-pool:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("render-pool", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&cfg.store, "store", "", "locker URL of the store, e.g. redis://127.0.0.1:6379,\nmysql://user:pass@127.0.0.1:3306/db, etcd://127.0.0.1:2379[,…],\nzk://127.0.0.1:2181[,…]; empty starts an embedded etcd")
	fs.IntVar(&cfg.workers, "workers", 6, "number of worker processes")
	fs.IntVar(&cfg.limit, "limit", 4, "permits of the semaphore: renders at once, store-wide")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long the workers run")
	fs.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "lock TTL: how long a killed worker's permit stays taken")
	fs.DurationVar(&cfg.killAt, "kill-after", 0, "when to SIGKILL a worker holding a permit (default: a quarter of -duration)")
	fs.DurationVar(&cfg.render, "render", 150*time.Millisecond, "mean time of one render")
	fs.IntVar(&cfg.worker, "worker", 0, "internal: run as this worker")
	fs.Usage = func() {
		fmt.Fprintf(out, `Usage: render-pool [flags]

The semaphore demo: -workers processes render reports in a loop, each render
under a permit of a locker.Semaphore of -limit permits, so that at most
-limit renders run at once across all of them. One worker is killed with
SIGKILL while it holds a permit; its permit comes back within -ttl. The
summary shows the holders over time; the exit status is 1 if they ever
exceeded -limit, or if the killed worker's permit never came back.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case cfg.workers < 2 || cfg.workers > 64:
		return cfg, usageErr(fs, "-workers must be between 2 and 64")
	case cfg.limit < 1 || cfg.limit >= cfg.workers:
		return cfg, usageErr(fs, "-limit must be at least 1 and below -workers, so that workers wait for permits")
	case cfg.ttl < 100*time.Millisecond:
		return cfg, usageErr(fs, "-ttl must be at least 100ms")
	case cfg.duration < 4*cfg.ttl:
		return cfg, usageErr(fs, "-duration must be at least four -ttl, so that the killed worker's permit can come back")
	case cfg.render <= 0:
		return cfg, usageErr(fs, "-render must be positive")
	}
	if cfg.killAt == 0 {
		cfg.killAt = cfg.duration / 4
	}
	if cfg.killAt <= 0 || cfg.killAt+cfg.ttl >= cfg.duration {
		return cfg, usageErr(fs, "-kill-after must leave more than -ttl of -duration")
	}
	return cfg, nil
}

func usageErr(fs *flag.FlagSet, msg string) error {
	fmt.Fprintln(fs.Output(), "render-pool:", msg)
	return errors.New(msg)
}

// event is one line a worker writes to its stdout.
type event struct {
	Kind   string `json:"kind"` // "ready", "start", "end"
	Worker int    `json:"worker"`
	Token  uint64 `json:"token,omitempty"`
	At     int64  `json:"at"` // Unix ns: after the grant (start), before the release (end)
}

// runWorker is one worker process: renders under a permit until -duration
// has passed.
func runWorker(ctx context.Context, cfg config, stdout io.Writer) error {
	var mux locker.Mux
	if err := backends.Register(&mux); err != nil {
		return err
	}
	l, err := locker.Open(ctx, &mux, cfg.store, locker.WithTTL(cfg.ttl), locker.WithPrefix("render-pool-demo/"),
		locker.WithOwnerLabel(fmt.Sprintf("worker-%d", cfg.worker)))
	if err != nil {
		return err
	}
	defer l.Close()
	sem, err := locker.NewSemaphore(l, "render", cfg.limit)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	emit := func(kind string, token uint64) {
		_ = enc.Encode(event{Kind: kind, Worker: cfg.worker, Token: token, At: time.Now().UnixNano()})
	}
	emit("ready", 0)
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	for ctx.Err() == nil {
		p, err := sem.Acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		emit("start", p.Token())
		select { // render
		case <-time.After(cfg.render/2 + rand.N(cfg.render)):
		case <-p.Done(): // the permit is lost: stop rendering
		case <-ctx.Done():
		}
		emit("end", p.Token())
		if err := p.Unlock(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, locker.ErrLost) {
			return err
		}
	}
	return nil
}

// runDemo starts the store (unless -store), the workers and the kill, and
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
		fmt.Fprintf(stdout, "store: %s\n", locker.RedactedURL(cfg.store))
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var events []event
	procs := make([]*exec.Cmd, cfg.workers+1)
	var readers sync.WaitGroup
	ready := make(chan int, cfg.workers)
	for w := 1; w <= cfg.workers; w++ {
		cmd := exec.CommandContext(ctx, exe, "-worker", fmt.Sprint(w), "-store", cfg.store, "-limit", fmt.Sprint(cfg.limit),
			"-workers", fmt.Sprint(cfg.workers), "-ttl", cfg.ttl.String(), "-duration", cfg.duration.String(),
			"-kill-after", cfg.killAt.String(), "-render", cfg.render.String())
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start worker %d: %w", w, err)
		}
		procs[w] = cmd
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
					ready <- e.Worker
					continue
				}
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}
		}()
	}
	fmt.Fprintf(stdout, "workers: %d processes, a semaphore of %d permits, TTL %v, running %v\n", cfg.workers, cfg.limit, cfg.ttl, cfg.duration)
	start := time.Now()
	for range cfg.workers {
		select {
		case <-ready:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return errors.New("workers did not start within 30s")
		}
	}

	// Kill a worker that holds a permit now.
	killed, killedAt := 0, time.Time{}
	select {
	case <-time.After(cfg.killAt):
	case <-ctx.Done():
		return ctx.Err()
	}
	for deadline := time.Now().Add(3 * time.Second); killed == 0 && time.Now().Before(deadline); {
		mu.Lock()
		held := holders(events)
		mu.Unlock()
		if len(held) > 0 {
			killed = held[0]
			_ = procs[killed].Process.Signal(syscall.SIGKILL)
			killedAt = time.Now()
			fmt.Fprintf(stdout, "killed worker %d with SIGKILL while it held a permit\n", killed)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if killed == 0 {
		return errors.New("no worker held a permit to kill within 3s")
	}
	for w := 1; w <= cfg.workers; w++ {
		if err := procs[w].Wait(); w != killed && err != nil {
			return fmt.Errorf("worker %d: %w", w, err)
		}
	}
	readers.Wait()
	return summarize(stdout, cfg, events, start, killed, killedAt)
}

// holders returns the workers that have started a render and not ended it.
func holders(events []event) []int {
	in := map[int]bool{}
	for _, e := range events {
		in[e.Worker] = e.Kind == "start"
	}
	var ws []int
	for w, h := range in {
		if h {
			ws = append(ws, w)
		}
	}
	slices.Sort(ws)
	return ws
}

// summarize prints the holders over time and checks them: never more than
// the limit, and the killed worker's permit back (as many live holders as
// permits) after the kill.
func summarize(out io.Writer, cfg config, events []event, start time.Time, killed int, killedAt time.Time) error {
	// A holder counts from after its grant to before its release; the
	// killed worker's last render ends at the kill.
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	open := map[int]int64{}
	for _, e := range events {
		switch e.Kind {
		case "start":
			open[e.Worker] = e.At
		case "end":
			if at, ok := open[e.Worker]; ok {
				edges = append(edges, edge{at, +1}, edge{e.At, -1})
				delete(open, e.Worker)
			}
		}
	}
	if at, ok := open[killed]; ok {
		edges = append(edges, edge{at, +1}, edge{killedAt.UnixNano(), -1})
	}
	// Releases first at equal times: a holder's release precedes the grant it enables.
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(min(max(a.at-b.at, -1), 1))
		}
		return a.delta - b.delta
	})

	const bucket = 250 * time.Millisecond
	n, peak, backAt := 0, 0, time.Time{}
	peaks := map[int]int{} // bucket -> its highest count
	for _, e := range edges {
		n += e.delta
		peak = max(peak, n)
		b := int(time.Duration(e.at-start.UnixNano()) / bucket)
		peaks[b] = max(peaks[b], n)
		if backAt.IsZero() && n == cfg.limit && e.at > killedAt.UnixNano() {
			backAt = time.Unix(0, e.at)
		}
	}
	renders := len(edges) / 2
	fmt.Fprintf(out, "\nconcurrent holders over time (the highest in each %v):\n", bucket)
	last := int(cfg.duration/bucket) + 4
	killBucket := int(killedAt.Sub(start) / bucket)
	for b := 0; b <= last; b++ {
		c, ok := peaks[b]
		if !ok && b > killBucket+int(cfg.ttl/bucket)+2 {
			continue
		}
		note := ""
		if b == killBucket {
			note = fmt.Sprintf("  <- worker %d killed holding a permit", killed)
		}
		if !backAt.IsZero() && b == int(backAt.Sub(start)/bucket) {
			note += "  <- its permit is back"
		}
		fmt.Fprintf(out, "%6.2fs %d %s%s\n", (time.Duration(b) * bucket).Seconds(), c, strings.Repeat("#", c), note)
	}
	fmt.Fprintf(out, "\nrenders: %d\n", renders)
	fmt.Fprintf(out, "most holders at once: %d (limit %d)\n", peak, cfg.limit)
	if backAt.IsZero() {
		fmt.Fprintf(out, "the killed worker's permit: never back\n")
	} else {
		fmt.Fprintf(out, "the killed worker's permit: back %v after the kill (TTL %v)\n", backAt.Sub(killedAt).Round(time.Millisecond), cfg.ttl)
	}
	switch {
	case peak > cfg.limit:
		return fmt.Errorf("%d holders at once, above the limit of %d", peak, cfg.limit)
	case backAt.IsZero():
		return errors.New("the killed worker's permit never came back")
	}
	return nil
}
