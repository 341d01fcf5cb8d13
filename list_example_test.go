package locker_test

import (
	"context"
	"fmt"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// List walks the held keys under a prefix, a page at a time, whoever holds
// them.
func ExampleList() {
	ctx := context.Background()
	l, err := memory.New(memory.NewStore(), locker.WithOwnerLabel("host-1"))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	for _, key := range []string{"jobs/nightly", "jobs/hourly", "cache/warm"} {
		if _, err := l.TryLock(ctx, key); err != nil {
			panic(err)
		}
	}
	for ks, err := range locker.List(ctx, l, "jobs/") {
		if err != nil {
			panic(err)
		}
		fmt.Println(ks.Key, "held by", ks.Label)
	}
	// Output:
	// jobs/hourly held by host-1
	// jobs/nightly held by host-1
}
