// Package sharetest holds checks of a [driver.Sharer] that need the order
// of its calls under control, which the conformance suite, going through
// the engine, cannot get. A backend's internal tests call them on a driver
// connected to a real server.
package sharetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// Sharer is a driver with shared holds.
type Sharer interface {
	driver.Driver
	driver.Sharer
}

func request(key, owner string, ttl time.Duration) driver.Request {
	return driver.Request{Key: key, Owner: owner, Label: owner, TTL: ttl, Lost: func(error) {}}
}

func permits(limit, weight int, queue bool) driver.Share {
	return driver.Share{Mode: driver.Permits, Limit: limit, Weight: weight, Queue: queue}
}

func release(ctx context.Context, t *testing.T, d Sharer, key, owner string, ttl time.Duration, g driver.Grant) {
	t.Helper()
	if err := d.Release(ctx, driver.Lease{Key: key, Owner: owner, Token: g.Token, TTL: ttl, State: g.State}); err != nil {
		t.Errorf("release %s: %v", owner, err)
	}
}

// WaiterTokenAfterLaterArrival checks that a queued request that fits
// once a holder leaves, and is granted at its next attempt after a later
// arrival was granted behind it, gets a token greater than the later
// arrival's. A token taken from the waiter's record (made first) would let
// a store guarded by the tokens refuse the waiter's writes. key must be
// free; d's Locker TTL is ttl.
func WaiterTokenAfterLaterArrival(ctx context.Context, t *testing.T, d Sharer, key string, ttl time.Duration) {
	t.Helper()
	a, err := d.TryAcquireShared(ctx, request(key, "a", ttl), permits(2, 2, false))
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.TryAcquireShared(ctx, request(key, "b", ttl), permits(2, 1, true))
	var r *driver.Residue
	if !errors.Is(err, driver.ErrHeld) || !errors.As(err, &r) {
		t.Fatalf("a queued request behind a full semaphore: got %v, want a Residue matching ErrHeld", err)
	}
	release(ctx, t, d, key, "a", ttl, a)
	c, err := d.TryAcquireShared(ctx, request(key, "c", ttl), permits(2, 1, false))
	if err != nil {
		t.Fatalf("a permit behind a waiter for the other one: %v", err)
	}
	b, err := d.TryAcquireShared(ctx, request(key, "b", ttl), permits(2, 1, true))
	if err != nil {
		t.Fatalf("the waiter's next attempt: %v", err)
	}
	if b.Token <= c.Token {
		t.Errorf("the waiter granted after a later arrival got token %d, not more than the later arrival's %d", b.Token, c.Token)
	}
	release(ctx, t, d, key, "b", ttl, b)
	release(ctx, t, d, key, "c", ttl, c)
}

// SubscribeSeesRelease checks that a subscription to a key wakes when a
// permit of it is released. key must be free; d's Locker TTL is ttl.
func SubscribeSeesRelease(ctx context.Context, t *testing.T, d interface {
	Sharer
	driver.Notifier
}, key string, ttl time.Duration) {
	t.Helper()
	g, err := d.TryAcquireShared(ctx, request(key, "a", ttl), permits(1, 1, false))
	if err != nil {
		t.Fatal(err)
	}
	ch, stop, err := d.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	release(ctx, t, d, key, "a", ttl, g)
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("a subscription to a key was not notified of a released permit")
	}
}

// InspectAndBreak checks that Inspect of a semaphore shows its limit,
// every holder (mode, weight, label, token) and its waiters, and that
// Break frees the permits of every holder. d must be a driver.Inspector
// and a driver.Breaker; key must be free; d's Locker TTL is ttl.
func InspectAndBreak(ctx context.Context, t *testing.T, d interface {
	Sharer
	driver.Inspector
	driver.Breaker
}, key string, ttl time.Duration) {
	t.Helper()
	a, err := d.TryAcquireShared(ctx, request(key, "a", ttl), permits(3, 1, false))
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.TryAcquireShared(ctx, request(key, "b", ttl), permits(3, 2, false))
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.TryAcquireShared(ctx, request(key, "w", ttl), permits(3, 1, true))
	var r *driver.Residue
	if !errors.As(err, &r) {
		t.Fatalf("a permit of a full semaphore, queued: got %v, want a Residue", err)
	}
	st, err := d.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Limit != 3 || st.Waiters != 1 || len(st.Holders) != 2 {
		t.Errorf("Inspect = %+v; want held, limit 3, 1 waiter, 2 holders", st)
	}
	want := map[string]driver.Holder{"a": {Weight: 1, Token: a.Token}, "b": {Weight: 2, Token: b.Token}}
	for _, h := range st.Holders {
		w, ok := want[h.Label]
		if !ok || h.Mode != driver.Permits || h.Weight != w.Weight || h.Token != w.Token {
			t.Errorf("Inspect's holder %+v; want one of %+v, mode permits", h, want)
		}
	}
	if err := d.Break(ctx, key); err != nil {
		t.Fatalf("Break: %v", err)
	}
	if err := r.Cleanup(ctx); err != nil {
		t.Errorf("the waiter's cleanup: %v", err)
	}
	c, err := d.TryAcquireShared(ctx, request(key, "c", ttl), permits(3, 3, false))
	if err != nil {
		t.Fatalf("all the permits after Break: %v", err)
	}
	release(ctx, t, d, key, "c", ttl, c)
}
