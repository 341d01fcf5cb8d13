package zookeeper

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestSharedWaiterTokenAfterLaterArrival: a queued request that fits once
// a holder leaves, and is granted at its next attempt after a later
// arrival was granted behind it, gets a token greater than the later
// arrival's. Its node's czxid is smaller: a token taken from it would let a
// store guarded by the tokens refuse the waiter's writes.
func TestSharedWaiterTokenAfterLaterArrival(t *testing.T) {
	srv := storeenv.ZooKeeper(t)
	conn, _, err := zk.Connect(srv.Addrs(), 3*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const ttl = 3 * time.Second
	d := newDriver(conn, nil, "/locker-shared-"+rand.Text()[:10], Config{}.nodeACL())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := d.Configure(ctx, driver.Config{TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const key = "permits"
	req := func(owner string) driver.Request {
		return driver.Request{Key: key, Owner: owner, Label: owner, TTL: ttl, Lost: func(error) {}}
	}
	permits := func(weight int, queue bool) driver.Share {
		return driver.Share{Mode: driver.Permits, Limit: 2, Weight: weight, Queue: queue}
	}
	release := func(owner string, g driver.Grant) {
		if err := d.Release(ctx, driver.Lease{Key: key, Owner: owner, Token: g.Token, TTL: ttl, State: g.State}); err != nil {
			t.Errorf("release %s: %v", owner, err)
		}
	}

	a, err := d.TryAcquireShared(ctx, req("a"), permits(2, false))
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.TryAcquireShared(ctx, req("b"), permits(1, true))
	var r *driver.Residue
	if !errors.Is(err, driver.ErrHeld) || !errors.As(err, &r) {
		t.Fatalf("a queued request behind a full semaphore: got %v, want a Residue matching ErrHeld", err)
	}
	release("a", a)
	c, err := d.TryAcquireShared(ctx, req("c"), permits(1, false))
	if err != nil {
		t.Fatalf("a permit behind a waiter for the other one: %v", err)
	}
	b, err := d.TryAcquireShared(ctx, req("b"), permits(1, true))
	if err != nil {
		t.Fatalf("the waiter's next attempt: %v", err)
	}
	if b.Token <= c.Token {
		t.Errorf("the waiter granted after a later arrival got token %d, not more than the later arrival's %d", b.Token, c.Token)
	}
	release("b", b)
	release("c", c)
}

// TestSubscribeSeesSharedRelease: a subscription to a key wakes when a
// permit of it is released, and its cancel returns.
func TestSubscribeSeesSharedRelease(t *testing.T) {
	srv := storeenv.ZooKeeper(t)
	conn, _, err := zk.Connect(srv.Addrs(), 3*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const ttl = 3 * time.Second
	d := newDriver(conn, nil, "/locker-shared-"+rand.Text()[:10], Config{}.nodeACL())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := d.Configure(ctx, driver.Config{TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const key = "permits"
	g, err := d.TryAcquireShared(ctx, driver.Request{Key: key, Owner: "a", TTL: ttl, Lost: func(error) {}},
		driver.Share{Mode: driver.Permits, Limit: 1, Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	ch, stop, err := d.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := d.Release(ctx, driver.Lease{Key: key, Owner: "a", Token: g.Token, TTL: ttl, State: g.State}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("a subscription to a key was not notified of a released permit")
	}
}
