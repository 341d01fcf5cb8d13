package redis

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// forgedToken is a token no store hands out in a test: a waiter that
// returns it trusted an inbox entry it must not trust.
const forgedToken = "4611686018427387904" // 2^62

// queuedWaiter starts a Lock of key on l, which key's holder keeps waiting,
// and returns its owner, its Locker's id, its result channel and a cancel
// that ends its wait.
func queuedWaiter(t *testing.T, ctx context.Context, admin *goredis.Client, l locker.Locker, key string) (owner, lid string, res <-chan error, cancel func()) {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	ch := make(chan error, 1)
	go func() {
		lk, err := l.Lock(wctx, key)
		if err == nil {
			err = errGranted{lk.Token()}
			_ = lk.Unlock(context.WithoutCancel(ctx))
		}
		ch <- err
	}()
	waitQueued(t, ctx, admin, key, 1)
	owners, err := admin.ZRange(ctx, name(kindQueue, key), 0, 0).Result()
	if err != nil || len(owners) != 1 {
		t.Fatalf("reading the queue: %v, %v", owners, err)
	}
	rec, err := admin.HGet(ctx, name(kindWaiters, key), owners[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	// <deadline> <seq> <ttl> <lid> w<wake> <label>; seq "i<n>": the
	// Locker reads its inbox.
	f := strings.Fields(rec)
	if !strings.HasPrefix(f[1], "i") {
		t.Fatalf("the waiter does not ask for its grants in its inbox: record %q", rec)
	}
	return owners[0], f[3], ch, cancel
}

// lockAndUnlock locks key on l in a goroutine, waiting as long as ctx
// allows, unlocks it, and sends the first error (nil when both succeeded).
func lockAndUnlock(ctx context.Context, l locker.Locker, key string) <-chan error {
	got := make(chan error, 1)
	go func() {
		lk, err := l.Lock(ctx, key)
		if err == nil {
			err = lk.Unlock(ctx)
		}
		got <- err
	}()
	return got
}

// errGranted is a waiter's Lock that returned the lock.
type errGranted struct{ token uint64 }

func (e errGranted) Error() string { return "granted" }

// expectWaiting fails when the waiter's Lock ended within a while.
func expectWaiting(t *testing.T, res <-chan error, why string) {
	t.Helper()
	select {
	case err := <-res:
		if g, ok := err.(errGranted); ok {
			t.Fatalf("%s: the waiter returned holding the lock, token %d, while the holder held it", why, g.token)
		}
		t.Fatalf("%s: the wait ended: %v", why, err)
	case <-time.After(500 * time.Millisecond):
	}
}

// TestInboxEntryGrantsNothingUntrusted: an inbox entry (written here as
// a writer of the store could) grants nothing when it names a waiter that
// gave up, even to the next waiter of the same Locker, or when it is read
// after the claim it names could have run out, counted from the waiter's
// attempt the hand-over read: its validity bound would lie past the
// store's expiry. The waiter then gets the lock from the store once the
// holder unlocks.
func TestInboxEntryGrantsNothingUntrusted(t *testing.T) {
	for _, c := range []struct {
		name string
		// entry queues a waiter on waiters and returns it, with the
		// owner an entry should name and the inbox it goes to.
		entry func(t *testing.T, ctx context.Context, admin *goredis.Client, waiters locker.Locker, key string) (owner, lid string, res <-chan error, cancel func())
	}{
		{"GoneWaiter", func(t *testing.T, ctx context.Context, admin *goredis.Client, waiters locker.Locker, key string) (string, string, <-chan error, func()) {
			gone, lid, res, cancel := queuedWaiter(t, ctx, admin, waiters, key)
			cancel()
			<-res
			waitQueued(t, ctx, admin, key, 0)
			next, _, res, cancel := queuedWaiter(t, ctx, admin, waiters, key)
			if next == gone {
				t.Fatal("two acquisitions share an owner token")
			}
			return gone, lid, res, cancel
		}},
		{"LateEntry", func(t *testing.T, ctx context.Context, admin *goredis.Client, waiters locker.Locker, key string) (string, string, <-chan error, func()) {
			owner, lid, res, cancel := queuedWaiter(t, ctx, admin, waiters, key)
			// The waiter's next attempt is a refresh interval (over 3 s)
			// away: its first attempt stays the last the store saw, and
			// an entry naming it is older than the claim.
			time.Sleep(600 * time.Millisecond)
			return owner, lid, res, cancel
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := storeenv.Redis(t)
			admin := newClient(t, srv.Addr())
			ctx := ctxFor(t, 30*time.Second)
			key := uniqueKey(t)
			holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
			waiters, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
			lk, err := holder.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			owner, lid, res, cancel := c.entry(t, ctx, admin, waiters, key)
			defer cancel()
			if err := admin.LPush(ctx, inboxName(lid), owner+" 1 "+forgedToken+" 500").Err(); err != nil {
				t.Fatal(err)
			}
			expectWaiting(t, res, "an untrusted inbox entry")
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if g, ok := (<-res).(errGranted); !ok || g.token == 1<<62 {
				t.Fatalf("the waiter must get the lock from the store after the holder's Unlock: %v", g)
			}
		})
	}
}

// TestInboxGrantEndsBeforeStoreExpiry: a lock handed over through the
// inbox has a local deadline no later than the store's expiry of the
// hand-over (the lock's PX, claim window, from the release).
func TestInboxGrantEndsBeforeStoreExpiry(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
	waiters, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
	lk, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan locker.Lock, 1)
	go func() {
		wl, err := waiters.Lock(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- wl
	}()
	waitQueued(t, ctx, admin, key, 1)
	// Let the attempt that the subscription's confirmation wakes pass,
	// so that the hand-over is taken from the inbox, not confirmed.
	time.Sleep(100 * time.Millisecond)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wl := <-got
	if wl == nil {
		return
	}
	defer wl.Unlock(ctx)
	// Read after the deadline was set: the store's expiry is before the
	// reply's arrival + pttl (+1 ms of rounding).
	pttl, err := admin.PTTL(ctx, name(kindLock, key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if expiry := time.Now().Add(pttl + time.Millisecond); wl.Deadline().After(expiry) {
		t.Fatalf("the lock's local deadline is %v after the store's expiry of the key", wl.Deadline().Sub(expiry))
	}
}

// TestNoInboxConfirms: a Locker with Config.NoInbox does not ask for its
// grants in an inbox, and its waiter still gets the lock on Unlock.
func TestNoInboxConfirms(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
	waiters, err := Config{NoInbox: true}.New(newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer waiters.Close()
	lk, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAndUnlock(ctx, waiters, key)
	waitQueued(t, ctx, admin, key, 1)
	recs, err := admin.HVals(ctx, name(kindWaiters, key)).Result()
	if err != nil || len(recs) != 1 {
		t.Fatalf("reading the waiter's record: %v, %v", recs, err)
	}
	if seq := strings.Fields(recs[0])[1]; strings.HasPrefix(seq, "i") {
		t.Errorf("a Locker with NoInbox asks for its grants in an inbox: record %q", recs[0])
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestInboxRefusedWakesWaiters: when the server starts refusing the
// Locker's BLPOP (its ACL changed), its waiters that asked for their grants
// in the inbox are woken and queue again without asking, long before
// their refresh, so that a hand-over pushed where nobody reads is not
// waited out.
func TestInboxRefusedWakesWaiters(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 40*time.Second)
	user := "noblpop_" + rand.Text()[:8]
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(context.WithoutCancel(ctx), "ACL", "DELUSER", user).Err() })
	o := clientOptions(srv.Addr())
	o.Username, o.Password = user, "pw"
	userClient := goredis.NewClient(o)
	t.Cleanup(func() { _ = userClient.Close() })

	key := uniqueKey(t)
	const ttl = time.Minute // a refresh every 20 s
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(ttl))
	waiters, d := newTestLocker(t, userClient, locker.WithTTL(ttl))
	lk, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAndUnlock(ctx, waiters, key)
	waitQueued(t, ctx, admin, key, 1)
	seq := func() string {
		recs, err := admin.HVals(ctx, name(kindWaiters, key)).Result()
		if err != nil || len(recs) != 1 {
			t.Fatalf("reading the waiter's record: %q, %v", recs, err)
		}
		return strings.Fields(recs[0])[1]
	}
	// Let the attempt that the subscription's confirmation wakes pass.
	time.Sleep(200 * time.Millisecond)
	if s := seq(); !strings.HasPrefix(s, "i") {
		t.Fatalf("the waiter does not ask for its grants in its inbox: seq %q", s)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "-blpop").Err(); err != nil {
		t.Fatal(err)
	}
	// The reader's next BLPOP, within inboxIdle, is refused.
	for !d.inboxDisabled() {
		select {
		case <-ctx.Done():
			t.Fatal("the refused BLPOP never disabled the inbox")
		case <-time.After(time.Millisecond):
		}
	}
	// Well before the waiter's refresh (20 s), it must have queued again.
	woken := ctxFor(t, 10*time.Second)
	for strings.HasPrefix(seq(), "i") {
		select {
		case <-woken.Done():
			t.Fatal("the waiter still asks for its grants in an inbox nobody reads")
		case <-time.After(time.Millisecond):
		}
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// inboxDisabled reports whether the Locker's inbox was disabled by a refusal.
func (d *redisDriver) inboxDisabled() bool { return d.inbox != nil && d.inbox.isDisabled() }

// TestCloseWakesTheInboxRead: Close of a Locker on a caller's client, whose
// Lock waits on its inbox, wakes the reader's BLPOP with an entry that
// names nobody instead of waiting for the BLPOP's timeout: go-redis cannot
// cut a blocked read on a client it does not own. The BLPOP here blocks for
// a minute and the release timeout is 30 s, so a Close that waits for
// either fails the generous bound. The entry is no grant: a waiter of a
// live Locker keeps waiting when it arrives.
func TestCloseWakesTheInboxRead(t *testing.T) {
	t.Parallel()
	srv := storeenv.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, 90*time.Second)
	key := uniqueKey(t)
	holder, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
	lk, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Unlock(context.WithoutCancel(ctx)) }()

	// The marker in a live Locker's inbox grants its waiter nothing.
	other, od := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
	od.inbox.idle = time.Minute
	_, lid, res, cancel := queuedWaiter(t, ctx, admin, other, key)
	if err := admin.LPush(ctx, inboxName(lid), closeMarker).Err(); err != nil {
		t.Fatal(err)
	}
	expectWaiting(t, res, "the inbox's close marker must never be taken for a grant")
	cancel()
	<-res

	// A key of its own: the first waiter may still be leaving key's queue.
	key += "/close"
	lk2, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk2.Unlock(context.WithoutCancel(ctx)) }()
	waiters, d := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second), locker.WithReleaseTimeout(30*time.Second))
	d.inbox.idle = time.Minute
	_, _, res, cancel = queuedWaiter(t, ctx, admin, waiters, key)
	defer cancel()
	for !strings.Contains(admin.ClientList(ctx).Val(), "cmd=blpop") {
		if ctx.Err() != nil {
			t.Fatal("the waiting Locker's inbox reader never ran BLPOP")
		}
		time.Sleep(10 * time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- waiters.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // a bound, not a measurement
		t.Fatal("Close of a Locker whose Lock waited on its inbox did not return within 10 s: it must wake the BLPOP, not wait for its timeout (1 min) or the release timeout (30 s)")
	}
	if err := <-res; err == nil || errors.As(err, new(errGranted)) {
		t.Errorf("the waiting Lock of a closed Locker returned %v, want an error", err)
	}
}

// TestInboxPassesOnAGrantOfAWaitThatGaveUp: a wait of a Locker whose calls
// are cut (Open's, Config.OwnClient) leaves its cleanup to the engine when
// its ctx ends, which runs it in the background. A hand-over to the waiter
// before then claims the key, and its grant reaches the Locker's inbox:
// the inbox reader must pass the key on at once, without the engine's
// cleanup, which then finds it done. Here the engine's cleanup never runs
// (the driver is called directly), and the claim is made to last (PERSIST):
// only the reader can free the key.
func TestInboxPassesOnAGrantOfAWaitThatGaveUp(t *testing.T) {
	srv := storeenv.Redis(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	admin := newClient(t, srv.Addr())
	oc := newOwnedClient(clientOptions(srv.Addr()))
	t.Cleanup(func() { _ = oc.Close() })
	_, d := newTestLocker(t, oc, locker.WithTTL(10*time.Second))
	key := uniqueKey(t)
	req := func(who string) driver.Request {
		return driver.Request{Key: key, Owner: who + "." + rand.Text(), TTL: 10 * time.Second}
	}
	holder := req("holder")
	g, err := d.TryAcquire(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	waiter := req("waiter")
	wctx, stop := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() {
		_, err := d.Acquire(wctx, waiter)
		res <- err
	}()
	waitQueued(t, ctx, admin, key, 1)
	stop()
	err = <-res
	var r *driver.Residue
	if !errors.As(err, &r) || r.Cleanup == nil {
		t.Fatalf("the wait whose ctx ended returned %v; want a driver.Residue, the engine's cleanup", err)
	}
	// The holder's release hands the key to the waiter, still in line.
	if err := d.Release(ctx, driver.Lease{Key: key, Owner: holder.Owner, Token: g.Token, TTL: holder.TTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
	lock := name(kindLock, key)
	t.Cleanup(func() { admin.Del(context.Background(), lock) })
	const persistIfWaiters = `local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then return redis.call('PERSIST', KEYS[1]) end
return -1`
	if err := admin.Eval(ctx, persistIfWaiters, []string{lock}, waiter.Owner).Err(); err != nil {
		t.Fatal(err)
	}
	passCtx, done := context.WithTimeout(ctx, 10*time.Second) // bounds a hang, measures nothing
	defer done()
	for {
		v, err := admin.Get(ctx, lock).Result()
		if errors.Is(err, goredis.Nil) || err == nil && !strings.HasPrefix(v, waiter.Owner+" ") {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-passCtx.Done():
			t.Fatalf("the key stayed claimed by the wait that gave up (%q): a grant the inbox reads for it must pass the key on before the engine's cleanup runs", v)
		case <-time.After(5 * time.Millisecond):
		}
	}
	other := req("other")
	g, err = d.TryAcquire(ctx, other)
	if err != nil {
		t.Fatalf("TryAcquire after the wait's grant was passed on: %v; want the key free", err)
	}
	if err := d.Release(ctx, driver.Lease{Key: key, Owner: other.Owner, Token: g.Token, TTL: other.TTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
	// The engine's cleanup finds the pass-on done, and sends nothing: the
	// Locker's client is closed by now.
	_ = oc.Close()
	if err := r.Cleanup(ctx); err != nil {
		t.Errorf("the engine's cleanup after the key was passed on = %v; want nil, and no second release", err)
	}
}

// TestInboxChannelReusedEmpty checks that the channel a waiter's
// registration reuses carries nothing for it: a grant the reader handed to
// a Lock that then returned without it names that Lock's owner, not the
// next one's.
func TestInboxChannelReusedEmpty(t *testing.T) {
	// A reader counted as running: register starts none.
	ib := &inbox{waiters: make(map[string]chan inboxGrant), running: true}
	first := ib.register("first")
	ib.mu.Lock()
	ib.waiters["first"] <- inboxGrant{seq: 1, token: 7, claim: time.Second}
	ib.mu.Unlock()
	ib.unregister("first")
	next := ib.register("next")
	defer ib.unregister("next")
	if next != first {
		t.Errorf("the next registration made a channel of its own; want the first one's, emptied")
	}
	select {
	case g := <-next:
		t.Fatalf("the next waiter got %+v, a grant for the first one", g)
	default:
	}
}
