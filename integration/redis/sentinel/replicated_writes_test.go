package sentinel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/redis"
)

// TestSentinelReplicatedWrites: with Config.Replicas 1 on a primary with a
// real replica, SetData, Extend, ForceUnlock and SetLimit return once the
// replica has their write (read from the replica right after each call).
// Once the replica is detached (REPLICAOF NO ONE), they fail saying the
// write did not reach the replicas, a held lock is lost when its last
// confirmed renewal runs out, and Unlock (which does not wait) succeeds.
func TestSentinelReplicatedWrites(t *testing.T) {
	srv := testenv.NewRedisSentinel(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const ttl = 3 * time.Second
	l, err := redis.Config{Replicas: 1}.New(failoverClient(t, srv), locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	replica := goredis.NewClient(&goredis.Options{Addr: srv.DataAddrs()[1]})
	defer replica.Close()

	lock := redis.KeysOf("data").Lock
	lk, err := l.TryLock(ctx, "data", locker.WithData([]byte("first")))
	if err != nil {
		t.Fatal(err)
	}
	if err := locker.SetData(ctx, lk, []byte("second")); err != nil {
		t.Fatalf("SetData with the replica online: %v", err)
	}
	if v, err := replica.Get(ctx, lock).Result(); err != nil || !strings.HasSuffix(v, "\x00second") {
		t.Errorf("the replica has %q, %v right after SetData returned; want the new data", v, err)
	}
	if err := locker.Extend(ctx, lk, locker.MinHold(3*ttl)); err != nil {
		t.Fatalf("Extend with the replica online: %v", err)
	}
	if d, err := replica.PTTL(ctx, lock).Result(); err != nil || d <= ttl {
		t.Errorf("the lock expires in %v, %v on the replica right after Extend(MinHold(%v)) returned; want more than the TTL %v", d, err, 3*ttl, ttl)
	}
	if err := locker.ForceUnlock(ctx, l, "data"); err != nil {
		t.Fatalf("ForceUnlock with the replica online: %v", err)
	}
	if n, err := replica.Exists(ctx, lock).Result(); err != nil || n != 0 {
		t.Errorf("the replica still has the lock (EXISTS = %d, %v) right after ForceUnlock returned", n, err)
	}
	sem, err := locker.NewSemaphore(l, "sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := locker.SetLimit(ctx, l, "sem", 5); err != nil {
		t.Fatalf("SetLimit with the replica online: %v", err)
	}
	if v, err := replica.HGet(ctx, redis.KeysOf("sem").Holders, " limit").Result(); err != nil || v != "5" {
		t.Errorf("the replica has the limit %q, %v right after SetLimit returned; want 5", v, err)
	}

	// Held before the replica goes.
	held, err := l.TryLock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	broken, err := l.TryLock(ctx, "broken")
	if err != nil {
		t.Fatal(err)
	}
	released, err := l.TryLock(ctx, "released")
	if err != nil {
		t.Fatal(err)
	}
	if err := replica.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	notReplicated := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "did not reach the replicas") {
			t.Errorf("%s without a replica: %v; want an error saying the write did not reach the replicas", what, err)
		}
	}
	if err := released.Unlock(ctx); err != nil {
		t.Errorf("Unlock without a replica: %v; a release does not wait for the replicas", err)
	}
	notReplicated("SetData", locker.SetData(ctx, held, []byte("lost?")))
	notReplicated("SetLimit", locker.SetLimit(ctx, l, "sem", 4))
	notReplicated("ForceUnlock", locker.ForceUnlock(ctx, l, "broken"))
	select {
	case <-held.Done():
		t.Logf("the lock ended with %v", held.Err())
		if err := held.Err(); !errors.Is(err, locker.ErrLost) {
			t.Errorf("the lock ended with %v; want an error matching ErrLost", err)
		}
	case <-ctx.Done():
		t.Errorf("a lock whose renewals no replica confirms must be lost once its last confirmed renewal runs out; still held after %v", time.Minute)
	}
	select {
	case <-broken.Done():
	case <-ctx.Done():
		t.Errorf("a lock broken by ForceUnlock must end (its renewal finds it gone); still held after %v", time.Minute)
	}
}
