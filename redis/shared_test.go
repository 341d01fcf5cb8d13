package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestSharedConflicts checks that a key is one kind of lock at a time in
// Redis: a semaphore with two limits, a semaphore and a read-write lock, a
// shared hold and a plain lock (TryLock and a waiting Lock, both ways) all
// fail with ErrInvalidOption naming both sides, never a hang or a grant.
func TestSharedConflicts(t *testing.T) {
	c := newClient(t, storeenv.Redis(t).Addr())
	l, _ := newTestLocker(t, c)
	ctx := ctxFor(t, 20*time.Second)
	key := uniqueKey(t)
	four, _ := locker.NewSemaphore(l, key, 4)
	five, _ := locker.NewSemaphore(l, key, 5)
	rw, _ := locker.NewRWMutex(l, key)
	p, err := four.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"limit 5":  func() error { _, err := five.TryAcquire(ctx); return err },
		"rwmutex":  func() error { _, err := rw.RLock(ctx); return err },
		"lock":     func() error { _, err := l.Lock(ctx, key); return err },
		"try lock": func() error { _, err := l.TryLock(ctx, key); return err },
	} {
		err := call()
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "semaphore of 4 permits") {
			t.Errorf("%s on a semaphore of 4: got %v, want ErrInvalidOption naming the limit 4", name, err)
		}
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, sharedKeys(key)[2:]...).Val(); n != 0 {
		t.Fatalf("%d shared names of the key are left once its last permit is back, want none", n)
	}
	lk, err := l.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("the key must be free for a plain lock once the last permit is back: %v", err)
	}
	if _, err := five.TryAcquire(ctx); !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "plain lock") {
		t.Errorf("TryAcquire on a plain lock's key: got %v, want ErrInvalidOption naming the plain lock", err)
	}
	_ = lk.Unlock(ctx)
}

// TestSharedLine checks that a heavy request waits in Redis's line and is
// not overtaken by a later light one, and that the release of the permits
// in its way wakes it.
func TestSharedLine(t *testing.T) {
	c := newClient(t, storeenv.Redis(t).Addr())
	a, _ := newTestLocker(t, c)
	b, _ := newTestLocker(t, c)
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
	sa, _ := locker.NewSemaphore(a, key, 3)
	sb, _ := locker.NewSemaphore(b, key, 3)
	p1, err := sa.TryAcquireN(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	heavy := make(chan error, 1)
	go func() {
		p, err := sb.AcquireN(ctx, 3)
		if err == nil {
			err = p.Unlock(ctx)
		}
		heavy <- err
	}()
	for c.ZCard(ctx, sharedKeys(key)[3]).Val() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the request for 3 permits never lined up")
		}
		time.Sleep(time.Millisecond)
	}
	if p, err := sa.TryAcquire(ctx); err == nil {
		_ = p.Unlock(ctx)
		t.Error("a permit was granted past a waiting request for 3")
	}
	if err := p1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-heavy; err != nil {
		t.Fatalf("AcquireN(3) once the permits were back: %v", err)
	}
}

// TestSharedRenewInspectBreak checks that a permit and a read hold are
// renewed past their TTL in the same batch as a plain lock, that Inspect
// lists a semaphore's holders and limit, that Keep (MinHold) holds a permit
// after Unlock, and that ForceUnlock frees a shared key.
func TestSharedRenewInspectBreak(t *testing.T) {
	c := newClient(t, storeenv.Redis(t).Addr())
	// 300 ms lost a renewal once in the docker suite, under load.
	const ttl = time.Second
	a, _ := newTestLocker(t, c, locker.WithTTL(ttl), locker.WithOwnerLabel("worker-1"))
	b, _ := newTestLocker(t, c, locker.WithTTL(ttl))
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
	sa, _ := locker.NewSemaphore(a, key, 4)
	ra, _ := locker.NewRWMutex(a, key+"-rw")
	p1, err := sa.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := sa.TryAcquireN(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ra.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := a.TryLock(ctx, key+"-plain")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * ttl)
	for _, h := range []locker.Lock{p1, p2, r, lk} {
		if h.Err() != nil {
			t.Fatalf("a hold must be renewed while held: %v", h.Err())
		}
	}
	sb, _ := locker.NewSemaphore(b, key, 4)
	if _, err := sb.TryAcquire(ctx); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("the permits, renewed, must stay taken: got %v", err)
	}
	if w, err := (func() (locker.Lock, error) { rb, _ := locker.NewRWMutex(b, key+"-rw"); return rb.TryLock(ctx) })(); err == nil {
		_ = w.Unlock(ctx)
		t.Fatal("a write hold was granted beside a renewed read hold")
	}

	st, err := locker.Inspect(ctx, b, key)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Limit != 4 || len(st.Holders) != 2 || st.Token != p2.Token() {
		t.Fatalf("Inspect = %+v, want held, limit 4, 2 holders, newest token %d", st, p2.Token())
	}
	for i, want := range []struct {
		token  uint64
		weight int
	}{{p1.Token(), 1}, {p2.Token(), 3}} {
		h := st.Holders[i]
		if h.Token != want.token || h.Weight != want.weight || h.Mode != locker.Permits || h.Label != "worker-1" ||
			h.Expires.IsZero() || h.Acquired.IsZero() {
			t.Errorf("holder %d = %+v, want token %d, weight %d, permits, label worker-1, times", i, h, want.token, want.weight)
		}
	}

	// Kept for a MinHold far longer than the test: only Break ends it.
	if err := p1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	p3, err := a.(locker.SharedLocker).TryLockShared(ctx, key, locker.Share{Mode: locker.Permits, Limit: 4}, locker.MinHold(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := p3.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl)
	if st, err := locker.Inspect(ctx, b, key); err != nil || len(st.Holders) != 2 {
		t.Fatalf("a permit kept for its MinHold must stay held after Unlock: %+v, %v", st, err)
	}
	if err := locker.ForceUnlock(ctx, b, key); err != nil {
		t.Fatalf("ForceUnlock of a semaphore's key: %v", err)
	}
	select {
	case <-p2.Done():
	case <-ctx.Done():
		t.Fatal("a broken permit's holder must learn it at its next renewal")
	}
	if n := c.Exists(ctx, sharedKeys(key)[2:]...).Val(); n != 0 {
		t.Fatalf("%d shared names of the key are left after ForceUnlock, want none", n)
	}
	if st, err := locker.Inspect(ctx, b, key); err != nil || st.Held || st.Holders != nil || st.Limit != 0 {
		t.Fatalf("Inspect of a free key = %+v, %v; want nothing", st, err)
	}
	_ = r.Unlock(ctx)
	_ = lk.Unlock(ctx)
}

// TestSharedReplicasUnconfirmedIsUndone: on a primary without replicas,
// with Config.Replicas 1, a permit is refused (WAIT never confirms) and
// leaves nothing behind, for TryAcquire and for a waiting Acquire.
func TestSharedReplicasUnconfirmedIsUndone(t *testing.T) {
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	l, err := Config{Replicas: 1, ReplicaTimeout: 20 * time.Millisecond}.New(newClient(t, srv.Addr()), locker.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := ctxFor(t, 10*time.Second)
	key := uniqueKey(t)
	sem, _ := locker.NewSemaphore(l, key, 2)
	if p, err := sem.TryAcquire(ctx); err == nil {
		_ = p.Unlock(ctx)
		t.Fatal("TryAcquire must fail when no replica confirms the permit")
	} else if !errors.Is(err, errNotReplicated) {
		t.Errorf("TryAcquire: %v; want an error saying the grant did not reach the replicas", err)
	}
	wctx := ctxFor(t, 300*time.Millisecond)
	if p, err := sem.Acquire(wctx); err == nil {
		_ = p.Unlock(ctx)
		t.Fatal("Acquire must not return a permit no replica confirmed")
	}
	if n := admin.Exists(ctx, sharedKeys(key)[2:]...).Val(); n != 0 {
		t.Errorf("%d shared names of the key are left behind by the undone grants", n)
	}
}

// TestSharedReleaseWakes checks that a released permit reaches a waiter
// through pub/sub: with a TTL of minutes, a waiter left to poll would
// sleep past the test's deadline.
func TestSharedReleaseWakes(t *testing.T) {
	c := newClient(t, storeenv.Redis(t).Addr())
	const ttl = 3 * time.Minute
	a, _ := newTestLocker(t, c, locker.WithTTL(ttl))
	b, _ := newTestLocker(t, newClient(t, storeenv.Redis(t).Addr()), locker.WithTTL(ttl))
	ctx := ctxFor(t, 20*time.Second)
	key := uniqueKey(t)
	sa, _ := locker.NewSemaphore(a, key, 1)
	sb, _ := locker.NewSemaphore(b, key, 1)
	p, err := sa.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		q, err := sb.Acquire(ctx)
		if err == nil {
			err = q.Unlock(ctx)
		}
		got <- err
	}()
	for c.ZCard(ctx, sharedKeys(key)[3]).Val() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the waiter never lined up")
		}
		time.Sleep(time.Millisecond)
	}
	waitSubscribers(t, ctx, c, channelName(key), 1)
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("a waiter must be woken by the release of the permit it waits for: %v", err)
	}
}

// TestSharedManyExpire checks that a key whose many holders all expired at
// once (more than Lua's unpack takes) is pruned, and that Break ends as
// many at once.
func TestSharedManyExpire(t *testing.T) {
	c := newClient(t, storeenv.Redis(t).Addr())
	l, d := newTestLocker(t, c)
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
	ks := sharedKeys(key)
	const n = 20000
	seed := func(expiry int64) { seedHolders(t, c, ks, n, 1, expiry) }
	seed(1) // expired long ago
	sem, _ := locker.NewSemaphore(l, key, 1)
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire on a key whose %d holders expired: %v", n, err)
	}
	_ = p.Unlock(ctx)
	seed(time.Now().Add(time.Hour).UnixMilli())
	if ok, err := d.breakShared(ctx, key); err != nil || !ok {
		t.Fatalf("break of %d holders: %v, %v", n, ok, err)
	}
	if m := c.Exists(ctx, ks[2:]...).Val(); m != 0 {
		t.Fatalf("%d shared names left after the break", m)
	}
}

// TestSharedManyHolders checks that an attempt counts every live holder of
// a key with more holders than one Lua unpack takes: the last permit of the
// limit is granted, and the next is refused.
func TestSharedManyHolders(t *testing.T) {
	c := newClient(t, storeenv.Redis(t).Addr())
	l, _ := newTestLocker(t, c)
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
	ks := sharedKeys(key)
	const n = 2500
	seedHolders(t, c, ks, n, n+1, time.Now().Add(time.Hour).UnixMilli())
	sem, _ := locker.NewSemaphore(l, key, n+1)
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire of the last permit beside %d holders: %v", n, err)
	}
	if q, err := sem.TryAcquire(ctx); !errors.Is(err, locker.ErrNotAcquired) {
		if err == nil {
			_ = q.Unlock(ctx)
		}
		t.Fatalf("TryAcquire beside %d holders and the last permit: %v, want ErrNotAcquired (a semaphore of %d)", n, err, n+1)
	}
	_ = p.Unlock(ctx)
}

// seedHolders writes n holders of one permit each, expiring at expiry
// (Unix ms), into the holds hash of a semaphore of limit whose shared
// names are ks (see sharedKeys); the test's cleanup deletes them.
func seedHolders(t *testing.T, c *goredis.Client, ks []string, n, limit int, expiry int64) {
	t.Helper()
	ctx := t.Context()
	pipe := c.Pipeline()
	pipe.HSet(ctx, ks[2], " kind", "permits", " limit", strconv.Itoa(limit))
	for i := range n {
		owner := "o" + strconv.Itoa(i)
		pipe.HSet(ctx, ks[2], owner, strconv.FormatInt(expiry, 10)+" permits 1 1 0 0 x")
	}
	pipe.PExpire(ctx, ks[2], time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), ks[2:]...) })
}

// TestSharedLeftovers checks that the holds and waiters hashes of a key
// whose holders and waiters are all gone (they expired unseen) neither
// decide the key's kind or limit nor outlive the next permit.
func TestSharedLeftovers(t *testing.T) {
	c := newClient(t, storeenv.Redis(t).Addr())
	l, _ := newTestLocker(t, c)
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
	ks := sharedKeys(key)
	pipe := c.Pipeline()
	pipe.HSet(ctx, ks[2], " kind", "rw", " limit", "0", "gone", "1 write 1 1 0 0 x")
	pipe.HSet(ctx, ks[4], "gone-waiter", "1 read 1 lid")
	pipe.PExpire(ctx, ks[2], time.Hour)
	pipe.PExpire(ctx, ks[4], time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	sem, _ := locker.NewSemaphore(l, key, 4)
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire on a key with leftovers of a read-write lock: %v", err)
	}
	if rec := c.HGet(ctx, ks[2], "gone").Val(); rec != "" {
		t.Errorf("a leftover holder record outlived a new permit: %q", rec)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, ks[2:]...).Val(); n != 0 {
		t.Fatalf("%d shared names of the key are left once its last permit is back, want none", n)
	}
}

// TestSharedRetriedAttempt checks that an attempt repeated with the same
// owner (a retry whose first reply was lost) gets the hold it already has,
// with the same token, without taking a second permit.
func TestSharedRetriedAttempt(t *testing.T) {
	c := newClient(t, storeenv.Redis(t).Addr())
	_, d := newTestLocker(t, c)
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
	req := driver.Request{Key: key, Owner: "retried", TTL: 10 * time.Second}
	s := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1}
	g1, err := d.TryAcquireShared(ctx, req, s)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := d.TryAcquireShared(ctx, req, s)
	if err != nil || g2.Token != g1.Token {
		t.Fatalf("retried attempt: token %d, %v; want the first grant's token %d", g2.Token, err, g1.Token)
	}
	other := req
	other.Owner = "other"
	if _, err := d.TryAcquireShared(ctx, other, s); err != nil {
		t.Fatalf("the second of 2 permits after a retried attempt: %v", err)
	}
	lease := driver.Lease{Key: key, Owner: "other", State: g1.State}
	if err := d.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	lease.Owner = "retried"
	if err := d.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
}

// TestSharedGrantWakesNext checks that a release wakes the head of the
// line, and that each grant from the line wakes the next waiter: three
// waiters on three Lockers, which hold on until all three hold, all get in
// after one release (a permit of weight 3, then a write hold). Their own
// polls come a minute later, past the test's deadline.
func TestSharedGrantWakesNext(t *testing.T) {
	addr := storeenv.Redis(t).Addr()
	const ttl = 3 * time.Minute
	for _, tc := range []struct {
		name         string
		hold, waiter func(l locker.Locker, key string) func(context.Context) (locker.Lock, error)
	}{
		{"permits", func(l locker.Locker, key string) func(context.Context) (locker.Lock, error) {
			s, _ := locker.NewSemaphore(l, key, 3)
			return func(ctx context.Context) (locker.Lock, error) { return s.AcquireN(ctx, 3) }
		}, func(l locker.Locker, key string) func(context.Context) (locker.Lock, error) {
			s, _ := locker.NewSemaphore(l, key, 3)
			return func(ctx context.Context) (locker.Lock, error) { return s.Acquire(ctx) }
		}},
		{"readers", func(l locker.Locker, key string) func(context.Context) (locker.Lock, error) {
			rw, _ := locker.NewRWMutex(l, key)
			return func(ctx context.Context) (locker.Lock, error) { return rw.Lock(ctx) }
		}, func(l locker.Locker, key string) func(context.Context) (locker.Lock, error) {
			rw, _ := locker.NewRWMutex(l, key)
			return func(ctx context.Context) (locker.Lock, error) { return rw.RLock(ctx) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, addr)
			ctx := ctxFor(t, 20*time.Second)
			key := uniqueKey(t)
			a, _ := newTestLocker(t, c, locker.WithTTL(ttl))
			p, err := tc.hold(a, key)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			const n = 3
			var in sync.WaitGroup
			in.Add(n)
			got := make(chan error, n)
			for i := range n {
				l, _ := newTestLocker(t, newClient(t, addr), locker.WithTTL(ttl))
				acquire := tc.waiter(l, key)
				go func() {
					q, err := acquire(ctx)
					if err != nil {
						in.Done()
						got <- err
						return
					}
					in.Done()
					in.Wait() // hold on until every waiter holds
					got <- q.Unlock(ctx)
				}()
				for c.ZCard(ctx, sharedKeys(key)[3]).Val() != int64(i+1) {
					if ctx.Err() != nil {
						t.Fatalf("waiter %d never lined up", i+1)
					}
					time.Sleep(time.Millisecond)
				}
			}
			waitSubscribers(t, ctx, c, channelName(key), n)
			if err := p.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			for range n {
				if err := <-got; err != nil {
					t.Fatalf("every waiter must get in after the release, each woken by the one before it: %v", err)
				}
			}
		})
	}
}

// TestSharedOverweightFreeKey: shared_acquire.lua refuses a hold of more
// permits than the limit on a key nobody holds, which takes the path that
// reads no holders, whatever the engine checked before.
func TestSharedOverweightFreeKey(t *testing.T) {
	c := newClient(t, storeenv.Redis(t).Addr())
	_, d := newTestLocker(t, c)
	ctx := ctxFor(t, 20*time.Second)
	key := uniqueKey(t)
	t.Cleanup(func() { c.Del(context.Background(), sharedKeys(key)...) })
	req := driver.Request{Key: key, Owner: "owner", TTL: time.Minute}
	_, err := d.TryAcquireShared(ctx, req, driver.Share{Mode: driver.Permits, Limit: 4, Weight: 5})
	if !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("5 permits of a free semaphore of 4: got %v, want ErrHeld", err)
	}
	if n := c.Exists(ctx, sharedKeys(key)[2:]...).Val(); n != 0 {
		t.Errorf("%d shared names of the key are left after a refused attempt that did not queue, want none", n)
	}
}
