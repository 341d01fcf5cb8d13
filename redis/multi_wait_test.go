package redis

import (
	"context"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestLockMultiWokenByRelease checks that a waiting LockMulti is woken by
// the release that frees a key it found held (its record in the waiters
// hash, release.lua's wake_watcher), long before it would try again by
// itself (TTL/3). The wake-up tells the wait that the release consumed its
// record: its successful attempt runs no HDEL (MONITOR).
func TestLockMultiWokenByRelease(t *testing.T) {
	t.Parallel()
	addr := storeenv.Redis(t).Addr()
	ctx := ctxFor(t, 90*time.Second)
	base := uniqueKey(t)
	keys := []string{base + ".a", base + ".b", base + ".c"}
	c := newClient(t, addr)
	t.Cleanup(func() {
		for _, k := range keys {
			c.Del(context.Background(), scriptKeys(k)...)
		}
	})
	// Unwoken, the wait tries again by itself after Jitter(TTL/3): 50 s
	// at the earliest. The Locker's backoff never ends it first.
	opts := []locker.Option{locker.WithTTL(5 * time.Minute), locker.WithBackoff(locker.ConstantBackoff(time.Hour))}
	holder, _ := newTestLocker(t, newClient(t, addr), opts...)
	waiter, wd := newTestLocker(t, newClient(t, addr), opts...)
	hm, err := locker.LockMulti(ctx, holder, keys)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		m, err := locker.LockMulti(ctx, waiter, keys)
		if err == nil {
			err = m.Unlock(ctx)
		}
		res <- err
	}()
	// The wait's attempt records it with the first key, and it subscribes
	// to the key's channel, whose confirmation makes it try once more.
	channel := channelName(keys[0]) + ":" + wd.lid
	for {
		n, err := c.HLen(ctx, name(kindWaiters, keys[0])).Result()
		if err != nil {
			t.Fatal(err)
		}
		subs, err := c.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 && subs[channel] > 0 {
			break
		}
		if !driver.Sleep(ctx, 5*time.Millisecond) {
			t.Fatal("the waiting LockMulti never recorded itself with the held key and subscribed")
		}
	}
	// Let that attempt pass: a release before it would be caught by it.
	driver.Sleep(ctx, 500*time.Millisecond)
	m := startMonitor(t, addr)
	if err := hm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting LockMulti was not woken by the release of its keys")
	}
	c.Ping(ctx) // ends the last script's lines in MONITOR
	m.expect(ctx, t, base, []costStep{
		{"releasing three keys, waking the wait recorded", 8},
		{"the woken wait taking three free keys, its record consumed", 10},
	})
}

// TestReleaseMultiEachWaiter checks that one ReleaseMulti serves every
// kind of waiter of its keys (multi_release.lua looks at each key until no
// queue or waiters hash is left): a Lock queued on the second key gets
// it, and a LockMulti recorded with the third is woken, long before it
// would try again by itself (TTL/3).
func TestReleaseMultiEachWaiter(t *testing.T) {
	t.Parallel()
	addr := storeenv.Redis(t).Addr()
	ctx := ctxFor(t, 90*time.Second)
	base := uniqueKey(t)
	keys := []string{base + ".a", base + ".b", base + ".c"}
	other := base + ".d"
	c := newClient(t, addr)
	t.Cleanup(func() {
		for _, k := range append(keys, other) {
			c.Del(context.Background(), scriptKeys(k)...)
		}
	})
	opts := []locker.Option{locker.WithTTL(5 * time.Minute), locker.WithBackoff(locker.ConstantBackoff(time.Hour))}
	holder, _ := newTestLocker(t, newClient(t, addr), opts...)
	single, _ := newTestLocker(t, newClient(t, addr), opts...)
	multi, md := newTestLocker(t, newClient(t, addr), opts...)
	hm, err := locker.LockMulti(ctx, holder, keys)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 2)
	go func() {
		l, err := single.Lock(ctx, keys[1])
		if err == nil {
			err = l.Unlock(ctx)
		}
		res <- err
	}()
	go func() {
		m, err := locker.LockMulti(ctx, multi, []string{keys[2], other})
		if err == nil {
			err = m.Unlock(ctx)
		}
		res <- err
	}()
	// Both wait: one queued on b, the other recorded with c and subscribed.
	channel := channelName(keys[2]) + ":" + md.lid
	for {
		queued, err := c.Exists(ctx, name(kindQueue, keys[1])).Result()
		if err != nil {
			t.Fatal(err)
		}
		recorded := watchRecords(ctx, t, c, keys[2], md.lid) > 0
		subs, err := c.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if queued == 1 && recorded && subs[channel] > 0 {
			break
		}
		if !driver.Sleep(ctx, 5*time.Millisecond) {
			t.Fatal("the Lock never queued on b, or the LockMulti never recorded itself with c and subscribed")
		}
	}
	// Let the LockMulti's attempt on the subscription's confirmation pass.
	driver.Sleep(ctx, 500*time.Millisecond)
	if err := hm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-res:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a waiter of the keys was not served by their release: the Lock queued on b, or the LockMulti recorded with c")
		}
	}
}
