package gocron_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/golocker/locker"
	"github.com/golocker/locker/backends"
	"github.com/golocker/locker/gocronlock"
	"github.com/golocker/locker/integration/internal/child"
	"github.com/golocker/locker/integration/internal/storeurl"
)

// electorChild is the child mode of TestElectorFirstTickAndHandOver.
const electorChild = "gocron-elector"

// runElectorChild runs one replica: a gocron scheduler with a gocronlock
// Elector on LOCKER_CHILD_URL and LOCKER_CHILD_KEY, a job every interval
// from LOCKER_GOCRON_START. It reports "ready", "run <tick>" for every run,
// after a "watch" line on stdin "lead" and "follow" when IsLeader changes
// (polled), and on a "stop" line "stopping", then "stopped" once it has
// shut the scheduler down and closed the Elector.
// It exits when stdin closes.
func runElectorChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ns, err := strconv.ParseInt(os.Getenv("LOCKER_GOCRON_START"), 10, 64)
	if err != nil {
		return fail(err)
	}
	start := time.Unix(0, ns)
	ctx := context.Background()
	var mux locker.Mux
	if err := backends.Register(&mux); err != nil {
		return fail(err)
	}
	l, err := locker.Open(ctx, &mux, os.Getenv("LOCKER_CHILD_URL"), locker.WithTTL(ttl), locker.WithPrefix("gocron/"),
		locker.WithOwnerLabel(fmt.Sprintf("replica-%d", os.Getpid())))
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	e, err := gocronlock.NewElector(l, os.Getenv("LOCKER_CHILD_KEY"))
	if err != nil {
		return fail(err)
	}
	defer e.Close()
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(e))
	if err != nil {
		return fail(err)
	}
	defer func() { _ = s.Shutdown() }()
	_, err = s.NewJob(gocron.DurationJob(interval), gocron.NewTask(func() {
		if k := tickOf(start); k >= 0 {
			child.Say("run", uint64(k))
		}
	}), gocron.WithStartAt(gocron.WithStartDateTime(start)))
	if err != nil {
		return fail(err)
	}
	s.Start()

	// The watch starts on command, after the first ticks: IsLeader must
	// not be called before gocron's first tick calls it.
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watch := func() {
		leading := false
		for {
			if now := e.IsLeader(watchCtx) == nil; now != leading {
				leading = now
				child.Say(map[bool]string{true: "lead", false: "follow"}[now], 0)
			}
			select {
			case <-watchCtx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	defer func() {
		stopWatch()
		watching.Wait()
	}()

	child.Say("ready", 0)
	for sc := bufio.NewScanner(os.Stdin); sc.Scan(); {
		switch sc.Text() {
		case "watch":
			watching.Go(watch)
		case "stop":
			child.Say("stopping", 0)
			if err := s.Shutdown(); err != nil {
				return fail(err)
			}
			if err := e.Close(); err != nil {
				return fail(err)
			}
			child.Say("stopped", 0)
		}
	}
	return 0
}

// TestElectorFirstTickAndHandOver: three replicas, each a process with a
// gocron scheduler and a gocronlock Elector on one Redis, ticks skewed by
// 0, 40 and 80 ms: each of the first ten ticks, tick 0 included, runs
// exactly once. Then the leader's scheduler shuts down and its Elector is
// closed (its Locker stays open): another replica leads within one TTL and
// runs the job.
func TestElectorFirstTickAndHandOver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs schedulers for about 15 s")
	}
	url := storeurl.Backends[0].URL(t) // redis
	key := fmt.Sprintf("elector-%d", time.Now().UnixNano())
	skews := []time.Duration{0, 40 * time.Millisecond, 80 * time.Millisecond}
	// Tick 0 comes after the children have started and met the store.
	t0 := time.Now().Truncate(interval).Add(4 * interval)
	events := make(chan child.Event, 256)
	var procs []*child.Proc
	for i, skew := range skews {
		env := []string{"LOCKER_CHILD_URL=" + url, "LOCKER_CHILD_KEY=" + key,
			"LOCKER_GOCRON_START=" + strconv.FormatInt(t0.Add(skew).UnixNano(), 10)}
		procs = append(procs, child.Start(t, i, electorChild, env, events))
	}

	runs := make([][]int, ticks) // the replicas that ran each tick
	leader := -1
	ready := 0
	end := t0.Add(skews[len(skews)-1] + (ticks-1)*interval + interval/2)
	for time.Now().Before(end) {
		ev := child.Next(t, events, time.Until(end)+10*time.Second, procs...)
		switch ev.What {
		case "ready":
			ready++
		case "run":
			if ev.N < ticks {
				runs[ev.N] = append(runs[ev.N], ev.Child)
				leader = ev.Child
			}
		}
	}
	if ready != len(procs) {
		t.Fatalf("%d of %d replicas were ready before the last tick", ready, len(procs))
	}
	for k, who := range runs {
		if len(who) != 1 {
			t.Errorf("tick %d ran on replicas %v; every tick, the first included, must run exactly once (runs per tick %v)", k, who, runs)
		}
	}
	if leader < 0 {
		t.Fatalf("no replica ran the job; runs per tick %v", runs)
	}
	for i, p := range procs {
		if i != leader {
			if err := p.Send("watch"); err != nil {
				t.Fatal(err)
			}
		}
	}

	if err := procs[leader].Send("stop"); err != nil {
		t.Fatal(err)
	}
	// The new leader's "lead" may reach us before the old one's "stopped":
	// the Elector hands the key on before its Close returns.
	var stopping, stopped time.Time
	var next child.Event
	child.Until(t, events, ttl+30*time.Second, func(ev child.Event) bool {
		switch {
		case ev.Child == leader && ev.What == "stopping":
			stopping = ev.At
		case ev.Child == leader && ev.What == "stopped":
			stopped = ev.At
		case ev.Child != leader && ev.What == "lead" && next.What == "":
			next = ev
		}
		return !stopped.IsZero() && next.What != ""
	}, procs...)
	t.Logf("replica %d leads %v after replica %d's Elector closed (TTL %v)", next.Child, next.At.Sub(stopped).Round(time.Millisecond), leader, ttl)
	if next.At.Before(stopping) {
		t.Errorf("replica %d led at %s, before replica %d began to stop at %s", next.Child, next.At.Format(stampMilli), leader, stopping.Format(stampMilli))
	}
	if gap := next.At.Sub(stopped); gap > ttl {
		t.Errorf("replica %d led %v after the leader's Elector closed; want within one TTL (%v)", next.Child, gap, ttl)
	}
	child.Until(t, events, 3*interval+10*time.Second, func(ev child.Event) bool {
		if ev.What == "run" && ev.Child == leader {
			t.Errorf("replica %d ran the job after its scheduler shut down", leader)
		}
		return ev.What == "run" && ev.Child == next.Child
	}, procs...)
}
