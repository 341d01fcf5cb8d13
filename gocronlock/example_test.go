package gocronlock_test

import (
	"fmt"
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
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(
		gocronlock.NewLocker(l, gocronlock.MinHold(55*time.Second), gocronlock.Prefix("billing/"))))
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
// within a TTL when it dies.
func ExampleNewElector() {
	l, err := memory.New(memory.NewStore(), locker.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(gocronlock.NewElector(l, "billing-scheduler")))
	if err != nil {
		panic(err)
	}
	s.Start()
	defer func() { _ = s.Shutdown() }()
}
