package locker_test

import (
	"context"
	"fmt"
	"log"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// The leader stores its address with its lock; any replica reads it with
// Inspect (or follows it with Watch), and the leader proclaims a new one
// without letting go.
func ExampleSetData() {
	store := memory.NewStore()
	ctx := context.Background()
	leader, err := memory.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer leader.Close()
	replica, err := memory.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer replica.Close()

	lk, err := leader.TryLock(ctx, "scheduler", locker.WithData([]byte("10.0.0.7:8080")))
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Unlock(ctx)
	st, err := locker.Inspect(ctx, replica, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader at %s\n", st.Data)

	err = locker.SetData(ctx, lk, []byte("10.0.0.9:8080"))
	if err != nil {
		log.Fatal(err) // ErrNotHeld: the lock was lost meanwhile
	}
	st, _ = locker.Inspect(ctx, replica, "scheduler")
	fmt.Printf("leader at %s, same token: %v\n", st.Data, st.Token == lk.Token())
	// Output:
	// leader at 10.0.0.7:8080
	// leader at 10.0.0.9:8080, same token: true
}
