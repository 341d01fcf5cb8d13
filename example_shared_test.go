package locker_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// At most two renders of a report run at once, store-wide: a third
// render finds no permit free.
func ExampleNewSemaphore() {
	store := memory.NewStore() // in production: redis.New(rdb), etcd.New(cli), …
	ctx := context.Background()
	l, err := memory.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	sem, err := locker.NewSemaphore(l, "render", 2) // at most 2 permits at once
	if err != nil {
		log.Fatal(err)
	}
	p1, err := sem.Acquire(ctx) // waits for a permit; p1 is a locker.Lock
	if err != nil {
		log.Fatal(err)
	}
	p2, err := sem.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = sem.TryAcquire(ctx) // all permits taken
	fmt.Println("third permit:", errors.Is(err, locker.ErrNotAcquired))

	if err := p1.Unlock(ctx); err != nil { // gives the permit back
		log.Fatal(err)
	}
	err = sem.Do(ctx, func(ctx context.Context) error {
		fmt.Println("rendering with the permit given back")
		return nil
	})
	fmt.Println("do:", err)
	_ = p2.Unlock(ctx)
	// Output:
	// third permit: true
	// rendering with the permit given back
	// do: <nil>
}

// Readers of a catalog share it; a writer waits for them and then has it
// alone.
func ExampleNewRWMutex() {
	store := memory.NewStore()
	ctx := context.Background()
	l, err := memory.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	rw, err := locker.NewRWMutex(l, "catalog")
	if err != nil {
		log.Fatal(err)
	}

	r1, err := rw.RLock(ctx) // shared with other readers
	if err != nil {
		log.Fatal(err)
	}
	r2, err := rw.RLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = rw.TryLock(ctx) // exclusive: refused while readers hold
	fmt.Println("writer while reading:", errors.Is(err, locker.ErrNotAcquired))
	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)

	w, err := rw.Lock(ctx) // waits for the readers
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer token above the readers':", w.Token() > r2.Token())
	_ = w.Unlock(ctx)
	// Output:
	// writer while reading: true
	// writer token above the readers': true
}

// Raising a semaphore's limit while its permits are held: the new permit is
// granted at once, and a Semaphore that still has the old limit is refused.
func ExampleSemaphore_SetLimit() {
	store := memory.NewStore()
	ctx := context.Background()
	l, err := memory.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	sem, err := locker.NewSemaphore(l, "render", 1)
	if err != nil {
		log.Fatal(err)
	}
	p1, err := sem.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	old, err := locker.NewSemaphore(l, "render", 1) // another process's, with the old limit
	if err != nil {
		log.Fatal(err)
	}

	if err := sem.SetLimit(ctx, 2); err != nil {
		log.Fatal(err)
	}
	p2, err := sem.TryAcquire(ctx)
	fmt.Println("second permit:", err == nil, "limit:", sem.Limit())
	_, err = old.TryAcquire(ctx)
	fmt.Println("old limit refused:", errors.Is(err, locker.ErrInvalidOption))

	_ = p2.Unlock(ctx)
	_ = p1.Unlock(ctx)
	// Output:
	// second permit: true limit: 2
	// old limit refused: true
}
