package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

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
// Unfair, the release takes its shorter path when a live waiter queues
// ahead (release.lua), and must wake the LockMulti there too. When that
// waiter is a Lock of the LockMulti's own Locker, the LockMulti waits
// behind it in the Locker's gate: the release must wake the Lock, whose
// Locker listens, though the releasing one does not.
// A MultiLock's Unlock (multi_release.lua) must wake it too.
func TestReleaseWithoutPubSubWakesLockMulti(t *testing.T) {
	t.Run("Fair", func(t *testing.T) { releaseWithoutPubSubWakesLockMulti(t, false, false, false) })
	t.Run("UnfairWithAQueuedLock", func(t *testing.T) { releaseWithoutPubSubWakesLockMulti(t, true, false, false) })
	t.Run("UnfairWithAQueuedLockOfTheSameLocker", func(t *testing.T) { releaseWithoutPubSubWakesLockMulti(t, true, true, false) })
	t.Run("MultiRelease", func(t *testing.T) { releaseWithoutPubSubWakesLockMulti(t, false, false, true) })
}

// releaseWithoutPubSubWakesLockMulti is TestReleaseWithoutPubSubWakesLockMulti
// with an unfair Locker and a Lock queued ahead (of the LockMulti's Locker
// when same), or with the key held by a MultiLock of two keys (multi).
func releaseWithoutPubSubWakesLockMulti(t *testing.T, unfair, same, multi bool) {
	const ttl = time.Minute // the waiter's refresh: 20 s
	srv := testenv.NewRedis(t)
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
	var held interface{ Unlock(context.Context) error }
	if multi {
		held, err = locker.TryLockMulti(ctx, quiet, []string{key, key + "/quiet"})
	} else {
		held, err = quiet.TryLock(ctx, key)
	}
	if err != nil {
		t.Fatal(err)
	}
	if unfair {
		// A Lock queues ahead of the LockMulti; nothing wakes it (the
		// release publishes nothing for it), so it waits for its refresh.
		other := loud
		if !same {
			other, err = redis.Config{Unfair: true}.New(newClient(t, srv.Addr()), locker.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
		}
		lctx, lcancel := context.WithCancel(ctx)
		defer lcancel()
		go func() {
			if l, err := other.Lock(lctx, key); err == nil {
				_ = l.Unlock(context.Background())
			}
		}()
		time.Sleep(300 * time.Millisecond)
	}
	got := make(chan error, 1)
	go func() {
		m, err := locker.LockMulti(ctx, loud, []string{key, key + "/other"})
		if err == nil {
			err = m.Unlock(ctx)
		}
		got <- err
	}()
	// The LockMulti finds the key held and waits; a slower start only
	// makes the check weaker.
	time.Sleep(500 * time.Millisecond)
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	released := time.Now()
	// A generous bound, not a measurement: without the wake-up the wait
	// lasts until its refresh, ten seconds or more.
	bound := 3 * time.Second
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("LockMulti: %v", err)
		}
		t.Logf("LockMulti got the keys %v after the release", time.Since(released).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("a LockMulti with pub/sub still waited %v after a Locker without pub/sub released the key it waits for: the release must wake it", bound)
	}
}

// TestSharedReleaseWithoutPubSubWakesWaiter: a permit's release by a
// Locker without pub/sub (Config.NoPubSub) wakes a waiting Acquire of a
// Locker with pub/sub on the same semaphore, which would otherwise wait
// for its refresh, a third of a long TTL.
func TestSharedReleaseWithoutPubSubWakesWaiter(t *testing.T) {
	const ttl = time.Minute // the waiter's refresh: 20 s
	srv := testenv.NewRedis(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	quiet, err := redis.Config{NoPubSub: true}.New(newClient(t, srv.Addr()), locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	loud, err := redis.New(newClient(t, srv.Addr()), locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer loud.Close()
	key := fmt.Sprintf("nopubsub-wakes-permit/%x", rand.Uint64())
	qs, err := locker.NewSemaphore(quiet, key, 1)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := locker.NewSemaphore(loud, key, 1)
	if err != nil {
		t.Fatal(err)
	}
	held, err := qs.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		p, err := ls.Acquire(ctx)
		if err == nil {
			err = p.Unlock(ctx)
		}
		got <- err
	}()
	// The Acquire finds the permit held and waits; a slower start only
	// makes the check weaker.
	time.Sleep(500 * time.Millisecond)
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	released := time.Now()
	// A generous bound, not a measurement: without the wake-up the wait
	// lasts until its refresh, ten seconds or more.
	const bound = 3 * time.Second
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		t.Logf("Acquire got the permit %v after the release", time.Since(released).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("an Acquire with pub/sub still waited %v after a Locker without pub/sub released the permit it waits for: the release must wake it", bound)
	}
}
