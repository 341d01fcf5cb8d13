package redis_test

import (
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestCloseSkipsAStaleWaitersLeave: Close of a Locker cut off from Redis
// while a Lock waits tries the waiter's leave only until Redis counts the
// waiter as gone (three refresh intervals after its last answered attempt,
// plus a hand-over's claim), not for its release timeout: each try waits
// for the client's read timeout, here 10 s.
func TestCloseSkipsAStaleWaitersLeave(t *testing.T) {
	const ttl = time.Second
	srv := testenv.NewRedis(t)
	p := testenv.NewProxy(t, srv.Addr())
	holder, err := redis.New(newClient(t, srv.Addr()), locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	o := clientOptions(p.Addr())
	o.ReadTimeout = 10 * time.Second
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	// NoInbox: the inbox reader's BLPOP has a bound of its own.
	waiter, err := redis.Config{NoInbox: true}.New(c, locker.WithTTL(ttl), locker.WithReleaseTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	lk, err := holder.TryLock(ctx, "close-stale-leave")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, "close-stale-leave")
		waited <- err
	}()
	time.Sleep(300 * time.Millisecond) // the Lock is queued and waits
	p.Cut()
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- waiter.Close() }()
	// A bound, not a measurement: the waiter is stale 1.5 s after its
	// last answered attempt; one try of its leave takes 10 s.
	const bound = 8 * time.Second
	select {
	case <-closed:
		t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(bound):
		p.Heal()
		<-closed
		t.Fatalf("Close of a cut-off Locker whose Lock waited took more than %v: it must not try the waiter's leave past the time Redis counts the waiter as gone", bound)
	}
	if err := <-waited; !errors.Is(err, locker.ErrClosed) {
		t.Errorf("the waiting Lock ended by Close = %v; want ErrClosed", err)
	}
}
