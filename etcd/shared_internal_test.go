package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/sharetest"
	"github.com/golocker/locker/internal/storeenv"
)

const sharedTTL = 2 * time.Second

// sharedDriver returns a driver on the test server with a TTL of
// sharedTTL, a ctx for the test, and a free key.
func sharedDriver(t *testing.T) (*etcdDriver, context.Context, string) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return driverWith(ctx, t), ctx, fmt.Sprintf("shared-internal/%x", rand.Uint64())
}

// driverWith returns a driver on the test server, with a TTL of sharedTTL,
// whose client dials with opts.
func driverWith(ctx context.Context, t *testing.T, opts ...grpc.DialOption) *etcdDriver {
	srv := storeenv.Etcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Addrs(), DialTimeout: 5 * time.Second, DialOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	d := &etcdDriver{cli: cli, sem: make(chan struct{}, 1)}
	if err := d.Configure(ctx, driver.Config{TTL: sharedTTL}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestSharedWaiterTokenAfterLaterArrival: a waiter's token is the revision
// of the write that granted it, not its key's create revision.
func TestSharedWaiterTokenAfterLaterArrival(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	sharetest.WaiterTokenAfterLaterArrival(ctx, t, d, key, sharedTTL)
}

// TestSubscribeSeesSharedRelease: the watch of a key's directory wakes on a
// released permit.
func TestSubscribeSeesSharedRelease(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	sharetest.SubscribeSeesRelease(ctx, t, d, key, sharedTTL)
}

// TestSharedInspectAndBreak: Inspect lists a semaphore's holders, Break
// frees them.
func TestSharedInspectAndBreak(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	sharetest.InspectAndBreak(ctx, t, d, key, sharedTTL)
}
