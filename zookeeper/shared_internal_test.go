package zookeeper

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/sharetest"
	"github.com/golocker/locker/internal/storeenv"
)

const sharedTTL = 3 * time.Second

// sharedDriver returns a driver on the test server, under a root of its
// own, with a TTL of sharedTTL, and a ctx for the test.
func sharedDriver(t *testing.T) (*zkDriver, context.Context) {
	d, _ := rootDriver(t, "/locker-shared-"+rand.Text()[:10])
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return d, ctx
}

// rootDriver returns a driver under root, with a TTL of sharedTTL, on a
// connection (a session) of its own, and that connection.
func rootDriver(t *testing.T, root string) (*zkDriver, *zk.Conn) {
	srv := storeenv.ZooKeeper(t)
	conn, _, err := zk.Connect(srv.Addrs(), sharedTTL, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	d := newDriver(conn, nil, root, Config{}.nodeACL())
	if err := d.Configure(t.Context(), driver.Config{TTL: sharedTTL}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, conn
}

// TestSharedWaiterTokenAfterLaterArrival: a waiter's token is the zxid of
// the write that granted it, not its node's czxid.
func TestSharedWaiterTokenAfterLaterArrival(t *testing.T) {
	d, ctx := sharedDriver(t)
	sharetest.WaiterTokenAfterLaterArrival(ctx, t, d, "permits", sharedTTL)
}

// TestSubscribeSeesSharedRelease: the watch of a key's queue wakes on a
// released permit.
func TestSubscribeSeesSharedRelease(t *testing.T) {
	d, ctx := sharedDriver(t)
	sharetest.SubscribeSeesRelease(ctx, t, d, "permits", sharedTTL)
}

// TestSharedInspectAndBreak: Inspect lists a semaphore's holders, Break
// frees them.
func TestSharedInspectAndBreak(t *testing.T) {
	d, ctx := sharedDriver(t)
	sharetest.InspectAndBreak(ctx, t, d, "permits", sharedTTL)
}

// TestSharedHandOn: a waiter that fits once the holder ahead of it leaves,
// with no write of the key's node since its create, is granted by its next
// attempt's listing, with no write: its token is its node's czxid, above
// the holder's, and the key's node's data version is unchanged.
func TestSharedHandOn(t *testing.T) {
	ds, _, ctx, h, queued, r := lineUp(t, 2, 1, 1, 1)
	defer func() { _ = r.Cleanup(ctx) }()
	czxid := czxidOf(t, ds[1], "waiter")
	give(ctx, t, ds[0], "holder", h)
	_, before, err := ds[1].conn.Get(ds[1].parentOf("k"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := ds[1].TryAcquireShared(ctx, limitRequest("waiter"), queued)
	if err != nil {
		t.Fatalf("the waiter's attempt once the holder left: %v", err)
	}
	defer give(ctx, t, ds[1], "waiter", g)
	_, after, err := ds[1].conn.Get(ds[1].parentOf("k"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Token != uint64(czxid) || g.Token <= h.Token {
		t.Errorf("the waiter got token %d; want its node's czxid %d, above the holder's %d", g.Token, czxid, h.Token)
	}
	if after.Version != before.Version {
		t.Errorf("the hand-off wrote the key's node: data version %d, then %d", before.Version, after.Version)
	}
	if !g.Queued {
		t.Error("a grant from the line is not marked Queued")
	}
}

// TestSharedWaiterAfterOlderClaim: a waiter behind a Locker of the version
// before this one (which claimed every grant from the line with a write of
// the key's node) claims too, so that its token is above that claim's. The
// older Locker's claim is made by hand, as it made it.
func TestSharedWaiterAfterOlderClaim(t *testing.T) {
	ds, conns, ctx, h, queued, r := lineUp(t, 2, 2, 1, 2)
	defer func() { _ = r.Cleanup(ctx) }()
	parent := ds[0].parentOf("k")
	holder := h.State.(*hold).path
	res, err := conns[0].Multi(&zk.CheckVersionRequest{Path: holder, Version: -1}, &zk.SetDataRequest{Path: parent, Version: -1})
	if err != nil || len(res) != 2 || res[1].Stat == nil {
		t.Fatalf("an older Locker's claim: %v, %v", res, err)
	}
	old := res[1].Stat.Mzxid
	give(ctx, t, ds[0], "holder", h)
	g, err := ds[1].TryAcquireShared(ctx, limitRequest("waiter"), queued)
	if err != nil {
		t.Fatalf("the waiter's attempt once the holder left: %v", err)
	}
	defer give(ctx, t, ds[1], "waiter", g)
	if g.Token <= uint64(old) {
		t.Errorf("the waiter got token %d, not above the older Locker's claim %d", g.Token, old)
	}
}
