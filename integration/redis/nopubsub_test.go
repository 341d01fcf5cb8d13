package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
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
	t.Parallel() // a server of its own: see TestMain
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
	t.Parallel() // a server of its own: see TestMain
	conformance.Run(t, singleHarnessWith(t, testenv.NewRedis(t), redis.Config{NoPubSub: true}, nil))
}

// TestReleaseWithoutPubSubWakesLockMulti: a single-key release by a Locker
// without pub/sub (Config.NoPubSub) wakes a LockMulti of a Locker with
// pub/sub that waits for the key: the channel is the key's, whoever
// releases. Without the wake-up the LockMulti would wait for its next
// refresh, a third of a long TTL.
//
// Unfair, the release barges when a live waiter that does not starve
// queues ahead (release.lua): it frees the key, wakes that waiter, and
// must wake the LockMulti too. The test moves the waiter's arrival an
// hour ahead (arrive), as if it queued just now, so that the release
// barges instead of handing the key over to it. Where the waiter's Locker
// cannot act (cut off through a proxy), only the release's own wake-up
// can reach the LockMulti. When the waiter is a Lock of the LockMulti's
// own Locker, the LockMulti waits behind it in the Locker's gate: the
// release must wake the Lock, whose Locker listens, though the releasing
// one does not.
//
// A first waiter that starves (its arrival moved an hour back) is handed
// the key instead, as a fair release hands it over. That release wakes no
// LockMulti, since the key stays held: the release of the Lock it went to
// wakes it.
// A MultiLock's Unlock (multi_release.lua) must wake it too.
func TestReleaseWithoutPubSubWakesLockMulti(t *testing.T) {
	t.Run("Fair", func(t *testing.T) { releaseWithoutPubSubWakesLockMulti(t, queuedNone, false) })
	t.Run("UnfairWithAQueuedLockCutOff", func(t *testing.T) { releaseWithoutPubSubWakesLockMulti(t, queuedCutOff, false) })
	t.Run("UnfairWithAQueuedLockOfTheSameLocker", func(t *testing.T) { releaseWithoutPubSubWakesLockMulti(t, queuedSame, false) })
	t.Run("UnfairWithAStarvingLock", func(t *testing.T) { releaseWithoutPubSubWakesLockMulti(t, queuedStarving, false) })
	t.Run("MultiRelease", func(t *testing.T) { releaseWithoutPubSubWakesLockMulti(t, queuedNone, true) })
}

// queuedLock says which Lock, if any, queues ahead of the LockMulti in
// releaseWithoutPubSubWakesLockMulti; any but queuedNone makes every
// Locker unfair.
type queuedLock int

const (
	queuedNone     queuedLock = iota // fair, nobody queued
	queuedCutOff                     // fresh, of a Locker cut off from the server
	queuedSame                       // fresh, of the LockMulti's Locker
	queuedStarving                   // starving, of another Locker
)

// releaseWithoutPubSubWakesLockMulti is TestReleaseWithoutPubSubWakesLockMulti
// with the Lock queued, or with the key held by a MultiLock of two keys
// (multi).
func releaseWithoutPubSubWakesLockMulti(t *testing.T, queued queuedLock, multi bool) {
	const ttl = time.Minute // the waiter's refresh: 20 s
	unfair := queued != queuedNone
	srv := testenv.NewRedis(t)
	admin := newClient(t, srv.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	quiet, err := redis.Config{NoPubSub: true, Unfair: unfair}.New(newClient(t, srv.Addr()), locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	loud, err := redis.Config{Unfair: unfair}.New(newClient(t, srv.Addr()), locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer loud.Close()

	key := fmt.Sprintf("nopubsub-wakes-multi/%x", rand.Uint64())
	names := redis.KeysOf(key)
	var held interface{ Unlock(context.Context) error }
	if multi {
		held, err = locker.TryLockMulti(ctx, quiet, []string{key, key + "/quiet"})
	} else {
		held, err = quiet.TryLock(ctx, key)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The queued Lock tells when it holds the key (locked), and unlocks
	// once unlock is closed.
	locked, unlock := make(chan struct{}), make(chan struct{})
	if queued != queuedStarving {
		close(unlock)
	}
	if unfair {
		other := loud
		var proxy *testenv.Proxy
		if queued != queuedSame {
			addr := srv.Addr()
			if queued == queuedCutOff {
				proxy = testenv.NewProxy(t, addr)
				addr = proxy.Addr()
			}
			other, err = redis.Config{Unfair: true}.New(newClient(t, addr), locker.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
		}
		lctx, lcancel := context.WithCancel(ctx)
		defer lcancel()
		go func() {
			l, err := other.Lock(lctx, key)
			if err != nil {
				return
			}
			close(locked)
			select {
			case <-unlock:
			case <-lctx.Done():
			}
			_ = l.Unlock(context.Background())
		}()
		// Nothing wakes the Lock before the release: once queued, it
		// sleeps for its refresh.
		awaitQueued(ctx, t, admin, names.Queue)
		if proxy != nil {
			proxy.Cut()
			defer proxy.Heal() // before the Lock leaves and its Locker closes
		}
	}
	got := make(chan error, 1)
	go func() {
		m, err := locker.LockMulti(ctx, loud, []string{key, key + "/other"})
		if err == nil {
			err = m.Unlock(ctx)
		}
		got <- err
	}()
	if queued == queuedSame {
		// The LockMulti waits behind the Lock in its Locker's gate and
		// records nothing; a slower start only makes the check weaker.
		time.Sleep(500 * time.Millisecond)
	} else {
		// The LockMulti found the key held and recorded its wait.
		awaitWatched(ctx, t, admin, names.Waiters)
	}
	switch queued {
	case queuedCutOff, queuedSame:
		arrive(ctx, t, admin, names.Queue, time.Hour)
	case queuedStarving:
		arrive(ctx, t, admin, names.Queue, -time.Hour)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	released := time.Now()
	// A generous bound, not a measurement: without the wake-up the wait
	// lasts until its refresh, ten seconds or more.
	const bound = 3 * time.Second
	timeout := time.After(bound)
	if queued == queuedStarving {
		select {
		case <-locked:
		case <-timeout:
			t.Fatalf("a starving Lock did not get the key within %v of the release", bound)
		}
		// The release handed the key over: it set the gap until the next
		// such hand-over (release.lua), in the hash the LockMulti's
		// record keeps.
		if v, err := admin.HGet(ctx, names.Waiters, " starved").Result(); err != nil || v == "" {
			t.Fatalf("the release did not hand the key over to the Lock queued ahead that starves (\" starved\" %q, %v)", v, err)
		}
		select {
		case err := <-got:
			t.Fatalf("a LockMulti got the key handed over to a Lock that holds it (err %v)", err)
		default:
		}
		close(unlock)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("LockMulti: %v", err)
		}
		t.Logf("LockMulti got the keys %v after the release", time.Since(released).Round(time.Millisecond))
	case <-timeout:
		t.Fatalf("a LockMulti with pub/sub still waited %v after a Locker without pub/sub released the key it waits for: the release must wake it, or the release of the Lock it handed the key to", bound)
	}
}

// awaitQueued returns once the queue q has a member.
func awaitQueued(ctx context.Context, t *testing.T, admin *goredis.Client, q string) {
	t.Helper()
	for admin.ZCard(ctx, q).Val() == 0 {
		if ctx.Err() != nil {
			t.Fatalf("no Lock queued (%s): %v", q, ctx.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitWatched returns once the waiters hash w records a LockMulti's wait
// (a field " watch <lid> <wid>", see redis.Keys).
func awaitWatched(ctx context.Context, t *testing.T, admin *goredis.Client, w string) {
	t.Helper()
	for {
		for _, f := range admin.HKeys(ctx, w).Val() {
			if strings.HasPrefix(f, " watch ") {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no LockMulti recorded its wait (%s): %v", w, ctx.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// arrive moves the arrival (server µs) of every member of the queue q by
// d, keeping their order, as the script tests' scriptRunner.arrive does.
// An hour ahead, each is a waiter that queued just now, whatever the time
// the test took: an unfair release frees the key and wakes it. An hour
// back, each has waited long enough to starve: an unfair release hands
// the key over to the first one unless it is awake (release.lua).
func arrive(ctx context.Context, t *testing.T, admin *goredis.Client, q string, d time.Duration) {
	t.Helper()
	zs, err := admin.ZRangeWithScores(ctx, q, 0, -1).Result()
	if err != nil || len(zs) == 0 {
		t.Fatalf("queue %s: %v, %v", q, zs, err)
	}
	for _, z := range zs {
		z.Score += float64(d / time.Microsecond)
		if err := admin.ZAddXX(ctx, q, z).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
