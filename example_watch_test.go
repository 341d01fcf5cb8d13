package locker_test

import (
	"context"
	"fmt"
	"log"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// Any replica follows who leads, without campaigning: Watch reports the
// holder, then nobody once the leader is gone.
func ExampleWatch() {
	store := memory.NewStore() // in production: redis.New(rdb), etcd.New(cli), …
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leader, err := memory.New(store, locker.WithOwnerLabel("replica-a"))
	if err != nil {
		log.Fatal(err)
	}
	defer leader.Close()
	follower, err := memory.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer follower.Close()

	lk, err := leader.TryLock(ctx, "leader")
	if err != nil {
		log.Fatal(err)
	}
	for st, err := range locker.Watch(ctx, follower, "leader") {
		switch {
		case err != nil:
			fmt.Println("unknown:", err) // the store did not answer; the watch goes on
		case st.Held:
			fmt.Println("leader:", st.Label)
			_ = lk.Unlock(ctx) // the leader steps down
		default:
			fmt.Println("nobody leads")
			cancel() // ends the watch
		}
	}
	// Output:
	// leader: replica-a
	// nobody leads
}
