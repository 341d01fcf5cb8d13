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
// polls. A restart loses the user (no persistence): the Restart hook makes
// it again once the server answers.
func TestConformanceNoPubSub(t *testing.T) {
	srv := testenv.NewRedis(t)
	admin := newClient(t, srv.Addr())
	const user, pass = "locker-nopubsub", "secret"
	setUser := func(t testing.TB) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+pass, "~*", "+@all", "allchannels", "-@pubsub").Err(); err != nil {
			t.Fatalf("ACL SETUSER: %v", err)
		}
	}
	setUser(t)
	h := singleHarnessWith(t, srv, redis.Config{}, func(o *goredis.Options) { o.Username, o.Password = user, pass })
	h.Restart = func(t testing.TB) {
		srv.Restart(t)
		setUser(t)
	}
	conformance.Run(t, h)
}

// TestConformanceNoPubSubForced runs the suite with Config.NoPubSub.
func TestConformanceNoPubSubForced(t *testing.T) {
	conformance.Run(t, singleHarnessWith(t, testenv.NewRedis(t), redis.Config{NoPubSub: true}, nil))
}
