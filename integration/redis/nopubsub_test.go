package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestConformanceNoPubSub runs the suite with Lockers whose ACL user may
// not use pub/sub (-@pubsub): each Locker finds out at its first refusal and
// polls. A restart would lose the user (no persistence): the restart cases
// run in TestConformanceNoPubSubForced.
func TestConformanceNoPubSub(t *testing.T) {
	srv := testenv.NewRedis(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	const user, pass = "locker-nopubsub", "secret"
	if err := newClient(t, srv.Addr()).Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+pass, "~*", "+@all", "allchannels", "-@pubsub").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	h := singleHarnessWith(t, srv, redis.Config{}, func(o *goredis.Options) { o.Username, o.Password = user, pass })
	h.Restart = nil
	conformance.Run(t, h)
}

// TestConformanceNoPubSubForced runs the suite with Config.NoPubSub.
func TestConformanceNoPubSubForced(t *testing.T) {
	conformance.Run(t, singleHarnessWith(t, testenv.NewRedis(t), redis.Config{NoPubSub: true}, nil))
}
