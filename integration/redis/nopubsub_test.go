package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestConformanceNoPubSub runs the suite with Lockers whose ACL user may
// not use pub/sub (-@pubsub): each Locker finds out at its first refusal and
// polls. The user is the default one, restricted: a restart forgets ACL
// changes (no persistence), and a Locker of a user that no longer exists
// would be refused its reconnection (WRONGPASS, which no retry cures)
// before the Restart hook could make the user again. The hook restricts
// the default user again once the server answers.
func TestConformanceNoPubSub(t *testing.T) {
	srv := testenv.NewRedis(t)
	admin := newClient(t, srv.Addr())
	restrict := func(t testing.TB) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := admin.Do(ctx, "ACL", "SETUSER", "default", "-@pubsub").Err(); err != nil {
			t.Fatalf("ACL SETUSER default -@pubsub: %v", err)
		}
	}
	restrict(t)
	h := singleHarnessWith(t, srv, redis.Config{}, nil)
	h.Restart = func(t testing.TB) {
		srv.Restart(t)
		restrict(t)
	}
	conformance.Run(t, h)
}

// TestConformanceNoPubSubForced runs the suite with Config.NoPubSub.
func TestConformanceNoPubSubForced(t *testing.T) {
	conformance.Run(t, singleHarnessWith(t, testenv.NewRedis(t), redis.Config{NoPubSub: true}, nil))
}
