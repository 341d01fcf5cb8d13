package zookeeper

import (
	"runtime/metrics"
	"testing"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestCallsReuseWorkers: the go-zookeeper calls of a busy driver run in
// workers that wait for the next call, not in a goroutine started for each
// (a goroutine and the growth of its stack per call cost the client CPU on
// every hand-off).
func TestCallsReuseWorkers(t *testing.T) {
	srv := storeenv.ZooKeeper(t)
	d, ctx := holdWatchDriver(t, srv, nil)
	cycle := func() {
		g, err := d.TryAcquire(ctx, driver.Request{Key: "workers", Lost: func(error) {}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, driver.Lease{Key: "workers", State: g.State}); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // the first call starts a worker
	const cycles = 40
	before := goroutinesCreated(t)
	for range cycles {
		cycle()
	}
	// Two calls per cycle. A hold that outlasts holdWatchDelay (a loaded
	// machine) starts its watch in a goroutine of its timer.
	if n := goroutinesCreated(t) - before; n > cycles/2 {
		t.Errorf("%d TryAcquire+Release cycles started %d goroutines; want their calls run by waiting workers (at most %d started)", cycles, n, cycles/2)
	}
}

// goroutinesCreated is how many goroutines this process has started.
func goroutinesCreated(t *testing.T) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatal("runtime/metrics has no count of goroutines created")
	}
	return s[0].Value.Uint64()
}

// TestTallyCountsAgainAfterAWait: Close waits a bounded time for the calls
// and cleanups in progress, and those it gave up on may start others, which
// count up from zero after that wait ended. A sync.WaitGroup may not be
// reused so (the race detector reports it: CI's TestConformance/
// CloseWhileIsolated did); a tally may.
func TestTallyCountsAgainAfterAWait(t *testing.T) {
	var n tally
	select {
	case <-n.idle():
	default:
		t.Fatal("idle is open at zero")
	}
	n.add()
	idle := n.idle()
	waited := make(chan struct{})
	go func() {
		<-idle
		close(waited)
	}()
	select {
	case <-idle:
		t.Fatal("idle is closed while one is counted")
	default:
	}
	n.done()
	<-waited
	// Counted up again from zero by a goroutine that never synchronised
	// with the waiter, as a straggling cleanup does after Close went on.
	again := make(chan struct{})
	go func() {
		n.add()
		close(again)
	}()
	<-again
	idle = n.idle()
	select {
	case <-idle:
		t.Fatal("idle is closed while one is counted again")
	default:
	}
	n.done()
	<-idle
}
