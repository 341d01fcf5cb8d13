package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/driver"
)

// TestSharedKeysReuseNames: the permits one Locker takes in turn, granted
// at once or after a wait, reuse their keys' names. etcd keeps every
// deleted key in its index until it compacts, and each request reads the
// directory whole: a fresh name per permit makes a busy semaphore slower
// the more often it is taken.
func TestSharedKeysReuseNames(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	start, err := d.cli.Get(ctx, "\x00")
	if err != nil {
		t.Fatal(err)
	}
	const cycles = 10
	for i := range cycles {
		holder := fmt.Sprintf("holder-%d", i)
		g, err := d.TryAcquireShared(ctx, limitReq(key, holder), permitsOf(1, 1, false))
		if err != nil {
			t.Fatal(err)
		}
		// A waiter queues behind it, then is let in.
		waiter := fmt.Sprintf("waiter-%d", i)
		if _, err := d.TryAcquireShared(ctx, limitReq(key, waiter), permitsOf(1, 1, true)); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("a request behind a held permit of 1: got %v, want ErrHeld", err)
		}
		releaseHold(ctx, t, d, key, holder, g)
		w, err := d.TryAcquireShared(ctx, limitReq(key, waiter), permitsOf(1, 1, true))
		if err != nil {
			t.Fatalf("the waiter after the release: %v", err)
		}
		releaseHold(ctx, t, d, key, waiter, w)
	}
	names := writtenNames(ctx, t, d, Dir(key), start.Header.Revision)
	if len(names) > 2 {
		t.Errorf("%d permits taken in turn by one Locker, each behind at most one other, wrote %d key names (want at most 2): %q", 2*cycles, len(names), names)
	}
}

// TestSharedNameTakenByStrayKey: a request whose slot's name is taken by
// a key it did not create (a write that landed late) takes another name,
// is granted, and the stray key is deleted before the lease is next kept
// alive.
func TestSharedNameTakenByStrayKey(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	s, err := d.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := d.shareName(s, Dir(key), "probe")
	d.freeShareName(&lockState{key: slot, shared: true, owner: "probe", sess: s})
	stray := sharedValue(limitReq(key, "stray"), permitsOf(2, 1, true))
	if _, err := d.cli.Put(ctx, slot, stray, clientv3.WithLease(s.id)); err != nil {
		t.Fatal(err)
	}
	g, err := d.TryAcquireShared(ctx, limitReq(key, "late"), permitsOf(2, 1, false))
	if err != nil {
		t.Fatalf("a request whose slot's name a stray key took: %v", err)
	}
	if k := g.State.(*lockState).key; k == slot {
		t.Fatalf("the request took the stray key's name %q", k)
	}
	if err := d.refresh(ctx, s, 0); err != nil {
		t.Fatal(err)
	}
	resp, err := d.cli.Get(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("the stray key %q outlived a keep-alive", slot)
	}
	releaseHold(ctx, t, d, key, "late", g)
}

// writtenNames returns the names of the keys written under dir since
// revision rev, as a watch from there replays them.
func writtenNames(ctx context.Context, t *testing.T, d *etcdDriver, dir string, rev int64) []string {
	t.Helper()
	end := dir + "~end of the test"
	if _, err := d.cli.Put(ctx, end, ""); err != nil {
		t.Fatal(err)
	}
	defer d.cli.Delete(context.WithoutCancel(ctx), end)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := map[string]bool{}
	var names []string
	for resp := range d.cli.Watch(wctx, dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			k := string(ev.Kv.Key)
			if k == end {
				return names
			}
			if !seen[k] {
				seen[k] = true
				names = append(names, k)
			}
		}
	}
	t.Fatal("the watch of the directory ended before the test's last write")
	return nil
}
