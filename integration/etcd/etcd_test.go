package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/integration/internal/lockasync"
	"github.com/golocker/locker/internal/etcdserver"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/memory"
)

// newLocker returns a Locker on its own client of eps, closed (Locker, then
// client) when the test ends.
func newLocker(t testing.TB, eps []string, opts ...locker.Option) locker.Locker {
	t.Helper()
	cli := newClient(t, eps)
	l, err := etcd.New(cli, append([]locker.Option{locker.WithTTL(testTTL), locker.WithPrefix(testPrefix)}, opts...)...)
	if err != nil {
		t.Fatalf("etcd.New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// uniqueKey returns a key of its own for the test.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("%s-%012x", strings.ReplaceAll(t.Name(), "/", "_"), rand.Uint64()&(1<<48-1))
}

// waiters lists the waiter keys of key (without the Locker's prefix), oldest
// first.
func waiters(t testing.TB, cli *clientv3.Client, key string) []*waiterKV {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, etcd.Dir(testPrefix+key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("list waiters: %v", err)
	}
	out := make([]*waiterKV, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = &waiterKV{key: string(kv.Key), rev: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease)}
	}
	return out
}

type waiterKV struct {
	key   string
	rev   int64
	lease clientv3.LeaseID
}

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after %v for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := etcd.New(nil); !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "nil *clientv3.Client") {
		t.Errorf("New(nil) = %v, want ErrInvalidOption naming the client", err)
	}
	cli := newClient(t, sharedEtcd(t))
	if _, err := etcd.New(cli, locker.WithTTL(1500*time.Millisecond)); !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "WithTTL") {
		t.Errorf("New with a TTL of 1.5 s = %v, want ErrInvalidOption naming WithTTL", err)
	}
	// etcd's default timing: a minimum lease TTL of 2 s.
	srv := startEtcd(t, etcdserver.Config{Tick: 100 * time.Millisecond, Election: time.Second})
	cli2 := newClient(t, srv.Endpoints())
	_, err := etcd.New(cli2, locker.WithTTL(time.Second))
	if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "WithTTL") || !strings.Contains(err.Error(), "minimum") {
		t.Errorf("New with a TTL below the server's minimum = %v, want ErrInvalidOption naming WithTTL and the minimum", err)
	}
	l, err := etcd.New(cli2, locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("New with the server's minimum TTL: %v", err)
	}
	l.Close()
}

func TestDir(t *testing.T) {
	for key, want := range map[string]string{
		"a":      "a\x00",
		"a/b":    "a/b\x00",
		"a%b":    "a%25b\x00",
		"a\x00b": "a%00b\x00",
		"%00":    "%2500\x00",
	} {
		if got := etcd.Dir(key); got != want {
			t.Errorf("Dir(%q) = %q, want %q", key, got, want)
		}
	}
	keys := []string{"a", "a/", "a/b", "ab", "a\x00", "a\x00b", "a%00", "a%00b", "a%", "a%2", "a%25", "%", ""}
	for _, k1 := range keys {
		for _, k2 := range keys {
			if k1 != k2 && strings.HasPrefix(etcd.Dir(k2), etcd.Dir(k1)) {
				t.Errorf("Dir(%q) = %q is a prefix of Dir(%q) = %q: their waiters would mix", k1, etcd.Dir(k1), k2, etcd.Dir(k2))
			}
		}
	}
}

// TestKeysPrefixesOfEachOther: keys that are prefixes of each other, or that
// encode alike, are distinct locks with distinct waiter directories.
func TestKeysPrefixesOfEachOther(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a, b := newLocker(t, eps), newLocker(t, eps)
	admin := newClient(t, eps)
	base := uniqueKey(t)
	keys := []string{base, base + "/b", base + "\x00", base + "%00", base + "%", base + "/"}
	var held []locker.Lock
	for _, k := range keys {
		lk, err := a.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock(%q) while the other keys are held: %v", k, err)
		}
		held = append(held, lk)
		if _, err := b.TryLock(ctx, k); !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("TryLock(%q) from another Locker while held: %v, want ErrNotAcquired", k, err)
		}
	}
	for _, k := range keys {
		if n := len(waiters(t, admin, k)); n != 1 {
			t.Errorf("%d keys under the directory of %q, want its holder's only", n, k)
		}
	}
	for _, lk := range held {
		if err := lk.Unlock(ctx); err != nil {
			t.Errorf("Unlock(%q): %v", lk.Key(), err)
		}
	}
}

func TestTokenIsCreateRevision(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	l := newLocker(t, eps)
	admin := newClient(t, eps)
	key := uniqueKey(t)
	for _, lock := range []func(context.Context, string, ...locker.LockOption) (locker.Lock, error){l.TryLock, l.Lock} {
		lk, err := lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		ws := waiters(t, admin, key)
		if len(ws) != 1 || uint64(ws[0].rev) != lk.Token() {
			t.Errorf("token %d, want the create revision of the holder's key (keys: %v)", lk.Token(), ws)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWaiterCleanupOnCancel: cancelled waits delete their waiter keys.
func TestWaiterCleanupOnCancel(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	admin := newClient(t, eps)
	key := uniqueKey(t)
	holder := newLocker(t, eps)
	lk, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	const n = 4
	var results []<-chan lockasync.Result
	for i := range n {
		results = append(results, lockasync.Lock(wctx, newLocker(t, eps), key))
		waitFor(t, 10*time.Second, fmt.Sprintf("waiter %d to queue", i), func() bool { return len(waiters(t, admin, key)) == i+2 })
	}
	wcancel()
	for _, ch := range results {
		r := <-ch
		if !errors.Is(r.Err, locker.ErrNotAcquired) || !errors.Is(r.Err, context.Canceled) {
			t.Errorf("cancelled Lock: %v, want ErrNotAcquired and context.Canceled", r.Err)
		}
	}
	// A cancelled Lock returns at once; its waiter key goes in the
	// background, promptly.
	waitFor(t, 5*time.Second, "the cancelled waiters' keys to go, leaving the holder's only", func() bool {
		ws := waiters(t, admin, key)
		return len(ws) == 1 && uint64(ws[0].rev) == lk.Token()
	})
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ws := waiters(t, admin, key); len(ws) != 0 {
		t.Errorf("after Unlock: %d keys left under the lock's directory", len(ws))
	}
	other, err := newLocker(t, eps).TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after the holder unlocked and every waiter gave up: %v", err)
	}
	other.Unlock(ctx)
}

// TestWaiterReturnsOnLeaseLoss: a waiter whose lease is revoked, or whose key
// is deleted, returns at once instead of when its turn comes.
func TestWaiterReturnsOnLeaseLoss(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	admin := newClient(t, eps)
	key := uniqueKey(t)
	holder := newLocker(t, eps)
	lk, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)

	t.Run("revoked", func(t *testing.T) {
		w := newLocker(t, eps)
		// A lock w holds on another key shares the lease: it is lost too.
		other, err := w.TryLock(ctx, uniqueKey(t))
		if err != nil {
			t.Fatal(err)
		}
		res := lockasync.Lock(ctx, w, key)
		waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return len(waiters(t, admin, key)) == 2 })
		if _, err := admin.Revoke(ctx, waiters(t, admin, key)[1].lease); err != nil {
			t.Fatal(err)
		}
		r := <-res
		if !errors.Is(r.Err, etcd.ErrLeaseLost) || ctx.Err() != nil {
			t.Fatalf("Lock whose lease was revoked: %v, want ErrLeaseLost before its ctx ended", r.Err)
		}
		select {
		case <-other.Done():
		case <-time.After(2*testTTL + 5*time.Second):
			t.Fatal("a lock on the revoked lease is still held")
		}
		if err := other.Err(); !errors.Is(err, locker.ErrLost) || !errors.Is(err, etcd.ErrLeaseLost) {
			t.Errorf("Err of a lock on the revoked lease: %v, want ErrLost and ErrLeaseLost", err)
		}
		// The Locker takes a new lease for later locks.
		again, err := w.TryLock(ctx, uniqueKey(t))
		if err != nil {
			t.Fatalf("TryLock after the lease was revoked: %v", err)
		}
		again.Unlock(ctx)
	})

	t.Run("deleted", func(t *testing.T) {
		w := newLocker(t, eps)
		res := lockasync.Lock(ctx, w, key)
		waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return len(waiters(t, admin, key)) == 2 })
		if _, err := admin.Delete(ctx, waiters(t, admin, key)[1].key); err != nil {
			t.Fatal(err)
		}
		r := <-res
		if r.Err == nil || errors.Is(r.Err, locker.ErrNotAcquired) || ctx.Err() != nil {
			t.Fatalf("Lock whose waiter key was deleted: %v, want an error before its ctx ended", r.Err)
		}
		if ws := waiters(t, admin, key); len(ws) != 1 {
			t.Errorf("%d keys under the lock's directory, want the holder's only", len(ws))
		}
	})
}

// TestHolderLeaseRevoked: revoking a holder's lease loses its lock.
func TestHolderLeaseRevoked(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	admin := newClient(t, eps)
	key := uniqueKey(t)
	l := newLocker(t, eps)
	lk, err := l.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Revoke(ctx, waiters(t, admin, key)[0].lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
	case <-ctx.Done():
		t.Fatal("Done still open after the holder's lease was revoked")
	}
	if err := lk.Err(); !errors.Is(err, locker.ErrLost) {
		t.Errorf("Err = %v, want ErrLost", err)
	}
	if err := lk.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Unlock of the lost lock = %v, want ErrNotHeld", err)
	}
	lk2, err := l.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock with a new lease: %v", err)
	}
	if lk2.Token() <= lk.Token() {
		t.Errorf("token %d after token %d", lk2.Token(), lk.Token())
	}
	lk2.Unlock(ctx)
}

// heldKey is the start of the queue tests: the shared etcd, a ctx of 60 s,
// an admin client, and a fresh key held by a Locker of its own.
func heldKey(t *testing.T) (eps []string, ctx context.Context, admin *clientv3.Client, key string, lk locker.Lock) {
	t.Helper()
	eps = sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	admin = newClient(t, eps)
	key = uniqueKey(t)
	lk, err := newLocker(t, eps).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return eps, ctx, admin, key, lk
}

// TestFIFO: waiters get the key in the order they queued, also when many
// wait (each hand-off reads the queue at the revision of the release).
func TestFIFO(t *testing.T) {
	eps, ctx, admin, key, lk := heldKey(t)
	const n = 16
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range n {
		l := newLocker(t, eps)
		wg.Go(func() {
			wl, err := l.Lock(ctx, key)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			wl.Unlock(ctx)
		})
		waitFor(t, 10*time.Second, fmt.Sprintf("waiter %d to queue", i), func() bool { return len(waiters(t, admin, key)) == i+2 })
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(order, want) {
		t.Errorf("waiters got the key in the order %v, want the order they queued in, %v", order, want)
	}
}

// TestFailedReleaseIsCleaned: a release whose outcome is unknown must not
// leave the key held while the Locker keeps its shared lease alive for other
// locks, nor end those other locks: the other lock must stay held for two
// TTLs after the key was freed. A round in which that other lock was lost
// only because no renewal came back in time (rerun.StarvedLoss) says
// nothing, and runs again, up to three rounds. A loss the store answered
// (the lease not found, the key gone) fails at once: a cleanup that
// revokes the shared lease loses the other lock so.
func TestFailedReleaseIsCleaned(t *testing.T) {
	eps := sharedEtcd(t)
	f := newFleet(t, eps, testTTL)
	rerun.Starved(t, 3, func(int) error { return failedReleaseIsCleaned(t, f, eps) })
}

// failedReleaseIsCleaned is one round of TestFailedReleaseIsCleaned. It
// returns the other lock's loss to renewals that never came back, and
// fails t on any other fault.
func failedReleaseIsCleaned(t *testing.T, f *fleet, eps []string) error {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	a := f.newLocker(t)
	defer a.Close()
	proxies := f.proxies[a]
	key, keep := uniqueKey(t), uniqueKey(t)+"-keep"
	lk, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The release is sent into a cut connection, which is then reset: it
	// never reaches etcd, and the client cannot tell.
	for _, p := range proxies {
		p.Cut()
	}
	uctx, ucancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = lk.Unlock(uctx)
	ucancel()
	for _, p := range proxies {
		p.Reset()
		p.Heal()
	}
	if err == nil {
		t.Fatal("Unlock through a cut connection succeeded")
	}
	// a keeps its lease alive for this lock. The first calls after the reset
	// may fail while the client reconnects.
	var kl locker.Lock
	waitFor(t, 10*time.Second, "a to lock another key", func() bool {
		kl, err = a.Lock(ctx, keep)
		return err == nil
	})
	defer kl.Unlock(ctx)
	b := newLocker(t, eps)
	bctx, bcancel := context.WithTimeout(ctx, 4*testTTL+5*time.Second)
	defer bcancel()
	bl, err := b.Lock(bctx, key)
	if err != nil {
		t.Fatalf("the key of a failed release stays held while its Locker keeps its lease alive: %v", err)
	}
	bl.Unlock(ctx)
	// b got the key right after the cleanup: a cleanup that revoked the
	// shared lease shows only at a's next keep-alive, within a TTL/3.
	select {
	case <-kl.Done():
		if starved := starvedLoss(kl); starved != nil {
			return starved
		}
		t.Errorf("the other lock of the Locker was lost: %v", kl.Err())
	case <-time.After(2 * testTTL):
	}
	return nil
}

func TestGuard(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli := newClient(t, eps)
	l := newLocker(t, eps)
	key := uniqueKey(t)
	lk, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	cmp, err := etcd.Guard(lk)
	if err != nil {
		t.Fatal(err)
	}
	data := testPrefix + "data/" + key
	put := func() bool {
		resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(data, "x")).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	if !put() {
		t.Error("a transaction guarded by Guard failed while the lock is held")
	}
	lk.Unlock(ctx)
	if put() {
		t.Error("a transaction guarded by Guard succeeded after Unlock")
	}
	mem, err := memory.New(memory.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	ml, err := mem.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Guard(ml); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("Guard of a memory lock = %v, want ErrInvalidOption", err)
	}
	if _, err := etcd.Guard(nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("Guard(nil) = %v, want ErrInvalidOption", err)
	}
	// Nested holds inside Do share the outer lock's guard.
	err = locker.Do(ctx, l, key, func(ctx context.Context) error {
		inner, err := l.Lock(ctx, key)
		if err != nil {
			return err
		}
		defer inner.Unlock(ctx)
		c, err := etcd.Guard(inner)
		if err != nil {
			return err
		}
		if resp, err := cli.Txn(ctx).If(c).Commit(); err != nil || !resp.Succeeded {
			return fmt.Errorf("guard of a nested hold: %v, %v", resp, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestCloseRevokes: Close leaves no key of the Locker behind, waiters
// included.
func TestCloseRevokes(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	admin := newClient(t, eps)
	key := uniqueKey(t)
	holder := newLocker(t, eps)
	lk, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	w := newLocker(t, eps)
	res := lockasync.Lock(ctx, w, key)
	waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return len(waiters(t, admin, key)) == 2 })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if r := <-res; !errors.Is(r.Err, locker.ErrClosed) {
		t.Errorf("wait ended by Close: %v, want ErrClosed", r.Err)
	}
	if ws := waiters(t, admin, key); len(ws) != 1 {
		t.Errorf("%d keys under the lock's directory after the waiter's Locker closed, want the holder's only", len(ws))
	}
}

// TestWaiterKeyReused: a Locker reuses one waiter key name per lock key, so
// that the key's directory does not fill up with deleted keys, which etcd
// keeps until it compacts and every read of the directory visits.
func TestWaiterKeyReused(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	admin := newClient(t, eps)
	l := newLocker(t, eps, locker.WithOwnerLabel("worker-7"))
	key := uniqueKey(t)
	var names []string
	var last uint64
	for _, lock := range []func(context.Context, string, ...locker.LockOption) (locker.Lock, error){l.Lock, l.TryLock, l.Lock} {
		lk, err := lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if lk.Token() <= last {
			t.Errorf("token %d after %d", lk.Token(), last)
		}
		last = lk.Token()
		names = append(names, waiters(t, admin, key)[0].key)
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if names[0] != names[1] || names[1] != names[2] {
		t.Errorf("waiter keys %q, want one name reused", names)
	}
	resp, err := admin.Get(ctx, etcd.Dir(testPrefix+key), clientv3.WithPrefix(), clientv3.WithRev(int64(last)))
	if err != nil {
		t.Fatal(err)
	}
	// The value names the owner for operators: token, space, label.
	if len(resp.Kvs) != 1 || !strings.HasSuffix(string(resp.Kvs[0].Value), " worker-7") {
		t.Errorf("the holder's key at its create revision: %v, want one key whose value ends with the owner label", resp.Kvs)
	}
}

// TestBreakManyPermits: ForceUnlock of a semaphore with more holders than
// etcd takes operations in one transaction (128 by default) frees every
// permit.
func TestBreakManyPermits(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	admin := newClient(t, eps)
	key := uniqueKey(t)
	const holders = 300
	l := newLocker(t, eps)
	sem, err := locker.NewSemaphore(l, key, holders)
	if err != nil {
		t.Fatal(err)
	}
	permits := make([]locker.Lock, 0, holders)
	for range holders {
		p, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire %d of %d: %v", len(permits)+1, holders, err)
		}
		permits = append(permits, p)
	}
	if err := locker.ForceUnlock(ctx, l, key); err != nil {
		t.Fatalf("ForceUnlock of %d permits: %v", holders, err)
	}
	if ws := waiters(t, admin, key); len(ws) != 0 {
		t.Errorf("%d keys under the semaphore's directory after ForceUnlock, want none", len(ws))
	}
	for i, p := range permits {
		select {
		case <-p.Done():
		case <-ctx.Done():
			t.Fatalf("permit %d of %d: Done still open after ForceUnlock", i+1, holders)
		}
	}
}

// TestCloseCutOffWaitSkipsDeletion: Close of a Locker cut off from etcd
// while a Lock waits does not spend the waiter key's deletion timeout on
// it. The key is on the Locker's lease, which Close revokes or lets
// expire, so the deletion buys nothing; Close then takes the revocation's
// bound, a TTL.
func TestCloseCutOffWaitSkipsDeletion(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	f := newFleet(t, eps, testTTL)
	holder := newLocker(t, eps)
	key := uniqueKey(t)
	hl, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Unlock(ctx)
	a := f.newLocker(t)
	waited := make(chan error, 1)
	go func() {
		_, err := a.Lock(context.Background(), key)
		waited <- err
	}()
	// The wait has put its waiter key in line once the key's directory
	// holds two keys.
	waitFor(t, 10*time.Second, "the waiter's key", func() bool {
		resp, err := f.admin.Get(ctx, etcd.Dir(testPrefix+key), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count >= 2
	})
	idle := idleLocker(ctx, t, f)
	took, base := closeBeside(t, f, a, idle)
	if err := awaitErr(t, waited, "the wait of the closed Locker to end"); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("the wait ended with %v, want ErrClosed", err)
	}
	// The revocation is bounded by the TTL (2 s), for both Lockers; the
	// deletion (5 s) came on top of it.
	if limit := base + 2*time.Second; took > limit {
		t.Errorf("Close of the cut-off Locker took %v, an idle one's %v: want at most %v (the lease's revocation, not the waiter key's deletion)", took, base, limit)
	}
}

// awaitErr returns what ch receives, failing the test, named by what,
// when nothing came within a minute: the Locks of these tests run under
// context.Background(), which only Close ends, and a Close that missed
// them would leave the test waiting for ever.
func awaitErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("waited a minute for %s", what)
		return nil
	}
}

// idleLocker returns a Locker of f whose session (its lease) exists and
// that holds nothing.
func idleLocker(ctx context.Context, t *testing.T, f *fleet) locker.Locker {
	t.Helper()
	l := f.newLocker(t)
	lk, err := l.TryLock(ctx, uniqueKey(t)+"/idle")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

// closeBeside cuts a and idle off from etcd and closes both at once. It
// returns how long each Close took: idle's is the lease revocation's
// bound measured beside a's, under the same load, so a bound on a's
// Close does not depend on how fast the machine runs.
func closeBeside(t *testing.T, f *fleet, a, idle locker.Locker) (took, base time.Duration) {
	t.Helper()
	for _, l := range []locker.Locker{a, idle} {
		for _, p := range f.proxies[l] {
			p.Cut()
		}
	}
	closeTook := func(l locker.Locker) time.Duration {
		start := time.Now()
		if err := l.Close(); err != nil {
			t.Logf("Close: %v", err)
		}
		return time.Since(start)
	}
	done := make(chan time.Duration, 1)
	go func() { done <- closeTook(idle) }()
	took = closeTook(a)
	base = <-done
	t.Logf("Close took %v, an idle cut-off Locker's %v", took.Round(time.Millisecond), base.Round(time.Millisecond))
	return took, base
}

// TestCloseCutOffMidTxnSkipsSettling: Close of a Locker cut off from etcd
// while a Lock's queueing transaction is in flight does not wait for that
// transaction's outcome (up to 2 s after its ctx ended) before it revokes
// the lease. The key it may write is on that lease: a put after the
// revocation fails, one before it goes with the lease. Close then takes
// the revocation's bound, a TTL (2 s), not 2 s more.
func TestCloseCutOffMidTxnSkipsSettling(t *testing.T) {
	eps := sharedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	f := newFleet(t, eps, testTTL)
	a := f.newLocker(t)
	key := uniqueKey(t)
	// The Locker's session (its lease) exists before the cut.
	lk, err := a.TryLock(ctx, key+"/first")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range f.proxies[a] {
		p.Cut()
	}
	idle := idleLocker(ctx, t, f)
	waited := make(chan error, 1)
	go func() {
		_, err := a.Lock(context.Background(), key)
		waited <- err
	}()
	time.Sleep(300 * time.Millisecond) // the Lock's Txn is sent, and gets no answer
	took, base := closeBeside(t, f, a, idle)
	if err := awaitErr(t, waited, "the Lock of the closed Locker to end"); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("the Lock ended with %v, want ErrClosed", err)
	}
	// The revocation takes up to the TTL (2 s), for both Lockers; the
	// settling (2 s) came on top of it.
	if limit := base + time.Second; took > limit {
		t.Errorf("Close of a Locker cut off mid-Txn took %v, an idle one's %v: want at most %v, the lease's revocation, without waiting for the Txn to settle", took, base, limit)
	}
	for _, p := range f.proxies[a] {
		p.Heal()
	}
	// Nothing of the closed Locker is left in the key's directory.
	waitFor(t, 10*time.Second, "the closed Locker's keys to go", func() bool {
		resp, err := f.admin.Get(ctx, etcd.Dir(testPrefix+key), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	})
}
