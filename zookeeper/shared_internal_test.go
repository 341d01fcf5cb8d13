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
