package locker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// Five replicas run the same cron tick; TryDo lets exactly one of them run
// the job for a plan and the others skip it.
func ExampleTryDo() {
	store := memory.NewStore() // in production: redis.New(rdb), etcd.New(cli), …
	ctx := context.Background()

	var mu sync.Mutex
	ran, skipped := 0, 0
	var wg sync.WaitGroup
	release := make(chan struct{})
	for replica := 0; replica < 5; replica++ {
		l, err := memory.New(store, locker.WithPrefix("PlanCron:"))
		if err != nil {
			log.Fatal(err)
		}
		defer l.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := locker.TryDo(ctx, l, "plan-42", func(ctx context.Context) error {
				mu.Lock()
				ran++
				mu.Unlock()
				<-release // the job runs while the others try
				return nil
			})
			if errors.Is(err, locker.ErrNotAcquired) {
				mu.Lock()
				skipped++
				if skipped == 4 {
					close(release)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Println("ran:", ran, "skipped:", skipped)
	// Output: ran: 1 skipped: 4
}

// Do waits for the lock; the function's ctx ends if the lock is lost.
// Inside it, taking the same key again through the same Locker is reentrant.
func ExampleDo() {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	stock := 3
	sell := func(ctx context.Context) error {
		return locker.Do(ctx, l, "stock:sku-1", func(ctx context.Context) error {
			if stock == 0 {
				return errors.New("sold out")
			}
			stock--
			return nil
		})
	}
	err = locker.Do(ctx, l, "stock:sku-1", func(ctx context.Context) error {
		// Reentrant: this ctx already holds "stock:sku-1".
		for i := 0; i < 2; i++ {
			if err := sell(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	fmt.Println("err:", err, "stock left:", stock)
	// Output: err: <nil> stock left: 1
}

// Fencing tokens let the protected resource reject a stale holder: it
// remembers the highest token it has seen and refuses lower ones.
func ExampleLock_Token() {
	store := memory.NewStore()
	a, err := memory.New(store)
	if err != nil {
		log.Fatal(err)
	}
	b, err := memory.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	ctx := context.Background()

	var highest uint64
	write := func(token uint64, v string) {
		if token < highest {
			fmt.Println("rejected stale write", v)
			return
		}
		highest = token
		fmt.Println("stored", v)
	}

	first, err := a.Lock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	t1 := first.Token()
	first.Unlock(ctx) // imagine instead: a paused past its TTL and lost it

	second, err := b.Lock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	write(second.Token(), "from b")
	write(t1, "from a") // a wakes up late with its old token
	second.Unlock(ctx)
	// Output:
	// stored from b
	// rejected stale write from a
}

// A job scheduled every second on several replicas: MinHold keeps its key
// taken for most of the second after it ran, so a replica whose tick comes
// a little later skips it instead of running it again; MaxHold releases
// the key of a run that hangs.
func ExampleMinHold() {
	store := memory.NewStore()
	early, _ := memory.New(store)
	late, _ := memory.New(store)
	defer early.Close()
	defer late.Close()
	job := func(context.Context) error { fmt.Println("sending the nightly mail"); return nil }
	opts := []locker.LockOption{locker.MinHold(900 * time.Millisecond), locker.MaxHold(time.Minute)}

	ctx := context.Background()
	_ = locker.TryDo(ctx, early, "nightly-mail", job, opts...) // runs, returns at once
	time.Sleep(10 * time.Millisecond)                          // the other replica's tick
	err := locker.TryDo(ctx, late, "nightly-mail", job, opts...)
	fmt.Println(errors.Is(err, locker.ErrNotAcquired))
	// Output:
	// sending the nightly mail
	// true
}

// An operator frees a key whose holder hung; the holder learns at its next
// renewal that its lock is lost, and another Locker takes the key. With
// the holder's TTL of 2 s, that renewal comes within a second. A busy
// machine may stall the example for over a second before the lock could
// expire on its own.
func ExampleForceUnlock() {
	store := memory.NewStore()
	ctx := context.Background()
	holder, _ := memory.New(store, locker.WithTTL(2*time.Second))
	defer holder.Close()
	operator, _ := memory.New(store)
	defer operator.Close()

	lk, err := holder.TryLock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	if st, err := locker.Inspect(ctx, operator, "nightly-report"); err == nil {
		fmt.Println("held:", st.Held)
	}
	if err := locker.ForceUnlock(ctx, operator, "nightly-report"); err != nil {
		log.Fatal(err)
	}
	<-lk.Done() // at the holder's next renewal
	fmt.Println("holder lost it:", errors.Is(lk.Err(), locker.ErrLost))
	err = locker.ForceUnlock(ctx, operator, "nightly-report")
	fmt.Println("again:", errors.Is(err, locker.ErrNotHeld))
	// Output:
	// held: true
	// holder lost it: true
	// again: true
}

// An order of several SKUs takes all their locks or none. The keys are taken
// in byte order, so two orders never deadlock, whatever order they list
// their SKUs in. Each key keeps its own fencing token.
func ExampleLockMulti() {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	ml, err := locker.LockMulti(ctx, l, []string{"sku:9", "sku:1", "sku:7"})
	if err != nil {
		log.Fatal(err) // no key is held
	}
	defer ml.Unlock(ctx)
	fmt.Println(ml.Keys(), ml.Token("sku:7") > 0)
	// <-ml.Done() closes when any key's hold ends.
	// Output: [sku:1 sku:7 sku:9] true
}
