package etcd

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/golocker/locker/driver"
)

// TestQueuedViewSavesReads: a queued permit request, woken by a deletion
// that cannot let it in (a waiter behind it leaves), is refused without a
// round trip; once the holder leaves, its next attempt is let in with the
// claim of its key alone, and gets the permit.
func TestQueuedViewSavesReads(t *testing.T) {
	holder, ctx, key := sharedDriver(t)
	other, _, _ := sharedDriver(t)
	var txns atomic.Int64
	waiter := driverWith(ctx, t, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasSuffix(method, "/Txn") || strings.HasSuffix(method, "/Range") {
				txns.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))

	req := func(owner string) driver.Request {
		return driver.Request{Key: key, Owner: owner, Label: owner, TTL: sharedTTL, Lost: func(error) {}}
	}
	share := driver.Share{Mode: driver.Permits, Limit: 1, Weight: 1, Queue: true}
	g, err := holder.TryAcquireShared(ctx, req("holder"), share)
	if err != nil {
		t.Fatal(err)
	}
	// The waiter queues, subscribes, and reads again, as the engine's wait
	// does.
	if _, err := waiter.TryAcquireShared(ctx, req("waiter"), share); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("first attempt behind a holder: %v", err)
	}
	wake, stop, err := waiter.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := waiter.TryAcquireShared(ctx, req("waiter"), share); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("attempt after subscribing: %v", err)
	}
	// A later waiter leaves: a deletion behind the waiter.
	if _, err := other.TryAcquireShared(ctx, req("later"), share); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("later arrival: %v", err)
	}
	var r *driver.Residue
	_, err = other.TryAcquireShared(ctx, req("later"), share)
	if !errors.As(err, &r) {
		t.Fatalf("later arrival's second attempt: %v", err)
	}
	if err := r.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	awaitWake(ctx, t, wake)
	before := txns.Load()
	if _, err := waiter.TryAcquireShared(ctx, req("waiter"), share); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("attempt after a later waiter left: %v", err)
	}
	if n := txns.Load() - before; n != 0 {
		t.Errorf("a wake-up that cannot let the waiter in sent %d reads or transactions, want 0", n)
	}
	if err := holder.Release(ctx, driver.Lease{Key: key, Owner: "holder", Token: g.Token, TTL: sharedTTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
	awaitWake(ctx, t, wake)
	before = txns.Load()
	wg, err := waiter.TryAcquireShared(ctx, req("waiter"), share)
	if err != nil {
		t.Fatalf("attempt after the holder left: %v", err)
	}
	if n := txns.Load() - before; n != 1 {
		t.Errorf("the attempt that let the waiter in sent %d reads or transactions, want 1 (the claim)", n)
	}
	if wg.Token <= g.Token {
		t.Errorf("the waiter's token %d is not above the holder's %d", wg.Token, g.Token)
	}
}

// awaitWake waits for a wake-up of a Subscribe.
func awaitWake(ctx context.Context, t *testing.T, wake <-chan struct{}) {
	t.Helper()
	select {
	case <-wake:
	case <-ctx.Done():
		t.Fatal("no wake-up from the key's watch")
	}
}
