package redis

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

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
	ctx, addr, c, base, keys := multiWaitSetup(t)
	opts := multiWaitOptions
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
	awaitRecorded(ctx, t, c, keys[0], wd.lid)
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
	opts := multiWaitOptions
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

// awaitRecorded waits until a LockMulti of the Locker lid, waiting for
// store key, has recorded itself in the key's waiters hash and subscribed
// to the key's channel, and then until the attempt that the subscription's
// confirmation starts has passed: a release before it would be caught by
// it.
func awaitRecorded(ctx context.Context, t *testing.T, c *goredis.Client, key, lid string) {
	t.Helper()
	channel := channelName(key) + ":" + lid
	for {
		fields, err := c.HKeys(ctx, name(kindWaiters, key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		subs, err := c.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(fields, func(f string) bool { return strings.HasPrefix(f, " watch "+lid+" ") }) && subs[channel] > 0 {
			break
		}
		if !driver.Sleep(ctx, 5*time.Millisecond) {
			t.Fatal("the waiting LockMulti never recorded itself with the held key and subscribed")
		}
	}
	driver.Sleep(ctx, 500*time.Millisecond)
}

// TestLockMultiBehindLockerGone checks that a wait recorded behind the
// record a release made for its Locker's next LockMulti (multi_next.go)
// is woken when that Locker does not lock the keys again: its Locker gives
// the record up and passes the wake-up on (multi_giveup.lua), long before
// the wait would try again by itself (TTL/3).
func TestLockMultiBehindLockerGone(t *testing.T) {
	ctx, addr, c, _, keys := multiWaitSetup(t)
	opts := multiWaitOptions
	first, _ := newTestLocker(t, newClient(t, addr), opts...)
	gone, gd := newTestLocker(t, newClient(t, addr), opts...)
	next, nd := newTestLocker(t, newClient(t, addr), opts...)
	last, ld := newTestLocker(t, newClient(t, addr), opts...)
	wait := func(l locker.Locker) <-chan *locker.MultiLock { return lockMultiAsync(ctx, t, l, keys) }
	held := func(got <-chan *locker.MultiLock, who string) *locker.MultiLock { return awaitMulti(t, got, who) }
	unlock := func(m *locker.MultiLock) { unlockMulti(ctx, t, m) }
	// gone waits once, so that its channels stay subscribed after it holds.
	m, err := locker.LockMulti(ctx, first, keys)
	if err != nil {
		t.Fatal(err)
	}
	got := wait(gone)
	awaitRecorded(ctx, t, c, keys[0], gd.lid)
	unlock(m)
	m = held(got, "gone")
	// Its release wakes next and records gone's next wait behind it.
	got = wait(next)
	awaitRecorded(ctx, t, c, keys[0], nd.lid)
	unlock(m)
	m = held(got, "next")
	fields, err := c.HKeys(ctx, name(kindWaiters, keys[0])).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(fields, func(f string) bool { return strings.HasPrefix(f, " watch "+gd.lid+" ") }) {
		t.Fatalf("the release of a Locker that had waited recorded no next wait of it: %q", fields)
	}
	// last records itself behind that record; gone never locks again.
	got = wait(last)
	awaitRecorded(ctx, t, c, keys[0], ld.lid)
	unlock(m)
	unlock(held(got, "last, recorded behind a Locker that did not lock again"))
}

// lockMultiAsync starts a LockMulti of keys by l and returns the channel
// its lock arrives on: nil when it failed (reported).
func lockMultiAsync(ctx context.Context, t *testing.T, l locker.Locker, keys []string) <-chan *locker.MultiLock {
	got := make(chan *locker.MultiLock, 1)
	go func() {
		m, err := locker.LockMulti(ctx, l, keys)
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	return got
}

// awaitMulti returns the lock that got delivers, and ends the test when it
// is nil or takes over 30 s: the waiting LockMulti of who was not woken.
func awaitMulti(t *testing.T, got <-chan *locker.MultiLock, who string) *locker.MultiLock {
	t.Helper()
	select {
	case m := <-got:
		if m == nil {
			t.FailNow()
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("the waiting LockMulti of %s was not woken by the release of its keys", who)
		return nil
	}
}

// unlockMulti releases m, and ends the test when that fails.
func unlockMulti(ctx context.Context, t *testing.T, m *locker.MultiLock) {
	t.Helper()
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// multiWaitOptions are the options of the Lockers of the LockMulti wait
// tests: unwoken, a wait tries again by itself after Jitter(TTL/3), 50 s
// at the earliest, and the Locker's backoff never ends it first.
var multiWaitOptions = []locker.Option{locker.WithTTL(5 * time.Minute), locker.WithBackoff(locker.ConstantBackoff(time.Hour))}

// multiWaitSetup starts a LockMulti wait test: its ctx, the server's
// address, a client, and three keys (and their base) that are deleted when
// the test ends.
func multiWaitSetup(t *testing.T) (ctx context.Context, addr string, c *goredis.Client, base string, keys []string) {
	t.Parallel()
	addr = storeenv.Redis(t).Addr()
	ctx = ctxFor(t, 90*time.Second)
	base = uniqueKey(t)
	keys = []string{base + ".a", base + ".b", base + ".c"}
	c = newClient(t, addr)
	t.Cleanup(func() {
		for _, k := range keys {
			c.Del(context.Background(), scriptKeys(k)...)
		}
	})
	return ctx, addr, c, base, keys
}

// TestLockMultiWaitOutlivesBusyHash checks that a record makes its waiters
// hash last: a hash kept busy by records, near the end of its expiry when
// a LockMulti records its wait there, must not expire under that wait and
// lose its wake-up (multi_acquire.lua renews the expiry below the stale
// time). Without the renewal both waits sleep until they try again by
// themselves (TTL/3).
func TestLockMultiWaitOutlivesBusyHash(t *testing.T) {
	ctx, addr, c, _, keys := multiWaitSetup(t)
	opts := multiWaitOptions
	holder, _ := newTestLocker(t, newClient(t, addr), opts...)
	first, fd := newTestLocker(t, newClient(t, addr), opts...)
	second, sd := newTestLocker(t, newClient(t, addr), opts...)
	m, err := locker.LockMulti(ctx, holder, keys)
	if err != nil {
		t.Fatal(err)
	}
	gotFirst := lockMultiAsync(ctx, t, first, keys)
	awaitRecorded(ctx, t, c, keys[0], fd.lid)
	// The hash has lived most of its time, as one kept busy does.
	w := name(kindWaiters, keys[0])
	const left = 2 * time.Second
	if err := c.PExpire(ctx, w, left).Err(); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(left)
	gotSecond := lockMultiAsync(ctx, t, second, keys)
	awaitRecorded(ctx, t, c, keys[0], sd.lid)
	// The old expiry passes: a hash left with it is gone, with both records.
	driver.Sleep(ctx, time.Until(end)+200*time.Millisecond)
	if n, err := c.Exists(ctx, w).Result(); err != nil || n != 1 {
		t.Errorf("the waiters hash expired under the waits recorded in it (exists %d, %v)", n, err)
	}
	unlockMulti(ctx, t, m)
	unlockMulti(ctx, t, awaitMulti(t, gotFirst, "first, recorded in a busy hash"))
	unlockMulti(ctx, t, awaitMulti(t, gotSecond, "second, recorded near the hash's expiry"))
}
