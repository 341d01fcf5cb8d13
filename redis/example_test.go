package redis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/redis"
)

// A scheduled job runs on several replicas but must run on one: each tick,
// every replica calls TryDo, the one that gets the key runs the job and the
// others skip it.
func ExampleNew() {
	ctx := context.Background()
	// Each replica (process) has its own client and Locker.
	rdbA := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdbA.Close()
	replicaA, err := redis.New(rdbA, locker.WithTTL(10*time.Second), locker.WithPrefix("example:"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer replicaA.Close()
	rdbB := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdbB.Close()
	replicaB, err := redis.New(rdbB, locker.WithTTL(10*time.Second), locker.WithPrefix("example:"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer replicaB.Close()

	tick := func(name string, l locker.Locker, during func()) {
		err := locker.TryDo(ctx, l, "report:2024-06", func(ctx context.Context) error {
			fmt.Println(name + ": generating the report")
			if during != nil {
				during()
			}
			return nil // ctx is cancelled if the lock is lost meanwhile
		})
		switch {
		case errors.Is(err, locker.ErrNotAcquired):
			fmt.Println(name + ": skipped, another replica has it")
		case err != nil:
			fmt.Println(name+":", err)
		}
	}
	// Replica B's tick comes while A's job still runs: B skips. Once A's
	// job is done the key is free again.
	tick("replica A", replicaA, func() { tick("replica B", replicaB, nil) })
	tick("replica B", replicaB, nil)

	// Output:
	// replica A: generating the report
	// replica B: skipped, another replica has it
	// replica B: generating the report
}

// Lock waits for the holder: its Unlock hands the key over to the waiter at
// once, long before the holder's TTL would have run out, with a greater
// fencing token.
func ExampleNew_waiting() {
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	newLocker := func() locker.Locker {
		l, err := redis.New(rdb, locker.WithTTL(30*time.Second), locker.WithPrefix("example:"))
		if err != nil {
			panic(err) // only for an invalid option
		}
		return l
	}
	l1, l2 := newLocker(), newLocker()
	defer l1.Close()
	defer l2.Close()

	first, err := l1.Lock(ctx, "stock:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("first holder has the key")
	type result struct {
		lk  locker.Lock
		err error
	}
	got := make(chan result)
	go func() {
		lk, err := l2.Lock(ctx, "stock:42") // waits
		got <- result{lk, err}
	}()
	time.Sleep(100 * time.Millisecond) // let it wait
	start := time.Now()
	if err := first.Unlock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	second := <-got
	if second.err != nil {
		fmt.Println(second.err)
		return
	}
	defer second.lk.Unlock(ctx)
	fmt.Println("second holder has the key, well before the TTL:", time.Since(start) < 10*time.Second)
	fmt.Println("its token is greater:", second.lk.Token() > first.Token())

	// Output:
	// first holder has the key
	// second holder has the key, well before the TTL: true
	// its token is greater: true
}

// A deployment whose Redis refuses pub/sub (ACL -@pubsub, rename-command, a
// proxy) sets Config.NoPubSub; without it the Locker switches at the first
// refusal. Waiters poll with the Locker's backoff, in queue order, and an
// Unlock hands the key over just the same. Against Sentinel, Config.Replicas
// grants a lock only once WAIT confirmed it on the replicas.
func ExampleConfig() {
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	newLocker := func() locker.Locker {
		l, err := redis.Config{NoPubSub: true}.New(rdb, locker.WithPrefix("example:"),
			locker.WithBackoff(locker.ExponentialBackoff(5*time.Millisecond, 100*time.Millisecond)))
		if err != nil {
			panic(err) // only for an invalid option
		}
		return l
	}
	l1, l2 := newLocker(), newLocker()
	defer l1.Close()
	defer l2.Close()

	first, err := l1.Lock(ctx, "invoice:7")
	if err != nil {
		fmt.Println(err)
		return
	}
	got := make(chan error)
	go func() {
		lk, err := l2.Lock(ctx, "invoice:7") // polls
		if err == nil {
			err = lk.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it wait
	fmt.Println("unlock:", first.Unlock(ctx))
	fmt.Println("waiter:", <-got)

	// Output:
	// unlock: <nil>
	// waiter: <nil>
}
