package locker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// A job took its key for at most a second; it finds more work and asks for
// a minute more, then gives the key up early but keeps it claimed for a
// little while, so that a replica whose tick comes late skips it.
func ExampleExtend() {
	store := memory.NewStore()
	ctx := context.Background()
	l, err := memory.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	lk, err := l.TryLock(ctx, "import", locker.MaxHold(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if err := locker.Extend(ctx, lk, locker.MaxHold(time.Minute)); err != nil {
		log.Fatal(err) // ErrNotHeld: the lock was lost meanwhile
	}
	fmt.Println("held past the first second:", lk.Deadline().After(time.Now().Add(time.Second)))
	if err := locker.Extend(ctx, lk, locker.MinHold(200*time.Millisecond)); err != nil {
		log.Fatal(err)
	}
	_ = lk.Unlock(ctx)
	_, err = l.TryLock(ctx, "import")
	fmt.Println("still claimed:", errors.Is(err, locker.ErrNotAcquired))
	// Output:
	// held past the first second: true
	// still claimed: true
}
