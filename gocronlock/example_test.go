package gocronlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/golocker/locker"
	"github.com/golocker/locker/gocronlock"
	"github.com/golocker/locker/memory"
)

// Every replica runs the same scheduler; each tick, the job runs on the one
// that takes its key, and MinHold keeps the key taken for the rest of the
// tick, so that a replica whose clock or scheduler lags does not run it
// again.
func ExampleNewLocker() {
	l, err := memory.New(memory.NewStore()) // redis.New(rdb), etcd.New(cli), … in production
	if err != nil {
		panic(err)
	}
	defer l.Close()
	jl, err := gocronlock.NewLocker(l, gocronlock.MinHold(55*time.Second), gocronlock.Prefix("billing/"),
		gocronlock.Logger(slog.Default())) // refused runs are logged at ERROR
	if err != nil {
		panic(err) // for example a MinHold the backend refuses
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(jl))
	if err != nil {
		panic(err)
	}
	_, err = s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(func() { fmt.Println("close stale rooms") }),
		gocron.WithName("close-stale-rooms"))
	if err != nil {
		panic(err)
	}
	s.Start()
	defer func() { _ = s.Shutdown() }()
}

// Only the replica that leads runs the scheduler's jobs; another takes over
// at once when the leader's Elector is closed, and within a TTL when its
// process dies. The campaign starts with NewElector, so the first tick runs
// on the leader.
func ExampleNewElector() {
	ctx := context.Background()
	l, err := memory.New(memory.NewStore(), locker.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	e, err := gocronlock.NewElector(l, "billing-scheduler")
	if err != nil {
		panic(err)
	}
	defer e.Close() // after Shutdown (defers run last first): resigns
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(e))
	if err != nil {
		panic(err)
	}
	defer func() { _ = s.Shutdown() }()
	s.Start()
	fmt.Println("leads:", e.IsLeader(ctx) == nil)
	// Output: leads: true
}
