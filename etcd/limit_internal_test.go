package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

func limitReq(key, owner string) driver.Request {
	return driver.Request{Key: key, Owner: owner, Label: owner, TTL: sharedTTL, Lost: func(error) {}}
}

func permitsOf(limit, weight int, queue bool) driver.Share {
	return driver.Share{Mode: driver.Permits, Limit: limit, Weight: weight, Queue: queue}
}

func releaseHold(ctx context.Context, t *testing.T, d *etcdDriver, key, owner string, g driver.Grant) {
	t.Helper()
	if err := d.Release(ctx, driver.Lease{Key: key, Owner: owner, Token: g.Token, TTL: sharedTTL, State: g.State}); err != nil {
		t.Errorf("release %s: %v", owner, err)
	}
}

// limitRecordOf returns the value of key's limit record, "" when there is
// none.
func limitRecordOf(ctx context.Context, t *testing.T, d *etcdDriver, key string) string {
	t.Helper()
	resp, err := d.cli.Get(ctx, LimitKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// wantConflict checks that err matches driver.ErrConflict and names every
// one of names.
func wantConflict(t *testing.T, err error, what string, names ...string) {
	t.Helper()
	if !errors.Is(err, driver.ErrConflict) {
		t.Fatalf("%s: got %v, want an error matching ErrConflict", what, err)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("%s: %q does not name %s", what, err, n)
		}
	}
}

// TestSetLimitKeepsTokens: SetLimit rewrites no holder's key, so that
// Inspect shows the holders with the tokens they were granted, the next
// grant's token is above them all, and the last holder to leave takes the
// limit record with it.
func TestSetLimitKeepsTokens(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	a, err := d.TryAcquireShared(ctx, limitReq(key, "a"), permitsOf(2, 1, false))
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.TryAcquireShared(ctx, limitReq(key, "b"), permitsOf(2, 1, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetLimit(ctx, key, 3); err != nil {
		t.Fatalf("SetLimit(3) of a held semaphore: %v", err)
	}
	st, err := d.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Limit != 3 || len(st.Holders) != 2 {
		t.Fatalf("Inspect after SetLimit(3): limit %d, %d holders, want 3 and 2", st.Limit, len(st.Holders))
	}
	for i, want := range []uint64{a.Token, b.Token} {
		if st.Holders[i].Token != want {
			t.Errorf("holder %d has token %d after SetLimit, was granted %d", i, st.Holders[i].Token, want)
		}
	}
	c, err := d.TryAcquireShared(ctx, limitReq(key, "c"), permitsOf(3, 1, false))
	if err != nil {
		t.Fatalf("the permit SetLimit(3) added: %v", err)
	}
	if c.Token <= b.Token {
		t.Errorf("a grant after SetLimit got token %d, not above the holders' %d", c.Token, b.Token)
	}
	releaseHold(ctx, t, d, key, "a", a)
	releaseHold(ctx, t, d, key, "b", b)
	if rec := limitRecordOf(ctx, t, d, key); rec == "" {
		t.Fatal("the limit record went before the last holder left")
	}
	releaseHold(ctx, t, d, key, "c", c)
	if rec := limitRecordOf(ctx, t, d, key); rec != "" {
		t.Errorf("the limit record %q outlived the last holder's release", rec)
	}
}

// TestLimitRecordLeftByCrashRulesNothing: a limit record whose holders all
// went with their lease (a crash: no release ran) does not rule the next
// holder, who deletes it; the next holder's limit rules.
func TestLimitRecordLeftByCrashRulesNothing(t *testing.T) {
	crashed, ctx, key := sharedDriver(t)
	d, _, _ := sharedDriver(t)
	if _, err := crashed.TryAcquireShared(ctx, limitReq(key, "crashed"), permitsOf(3, 1, false)); err != nil {
		t.Fatal(err)
	}
	if err := crashed.SetLimit(ctx, key, 5); err != nil {
		t.Fatal(err)
	}
	// The lease goes without a release, as a crashed process's does.
	if err := crashed.Close(); err != nil {
		t.Fatal(err)
	}
	if rec := limitRecordOf(ctx, t, d, key); rec == "" {
		t.Fatal("no limit record left behind: the test cannot tell")
	}
	g, err := d.TryAcquireShared(ctx, limitReq(key, "next"), permitsOf(2, 2, false))
	if err != nil {
		t.Fatalf("a semaphore of 2 on a key whose holders crashed after SetLimit(5): %v", err)
	}
	if rec := limitRecordOf(ctx, t, d, key); rec != "" {
		t.Errorf("the limit record %q left by a crash outlived the next grant", rec)
	}
	st, err := d.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Limit != 2 {
		t.Errorf("Inspect shows a limit of %d, want the new holder's 2", st.Limit)
	}
	_, err = d.TryAcquireShared(ctx, limitReq(key, "other"), permitsOf(5, 1, false))
	wantConflict(t, err, "a semaphore of 5 behind the new holder of 2", "2", "5")
	releaseHold(ctx, t, d, key, "next", g)
}

// TestSetLimitOnOtherKeys: SetLimit refuses a key held as a plain lock or
// a read-write lock, naming it, and writes no record there or on a key
// with neither holders nor waiters.
func TestSetLimitOnOtherKeys(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	if err := d.SetLimit(ctx, key, 4); err != nil {
		t.Fatalf("SetLimit of a free key: %v", err)
	}
	if rec := limitRecordOf(ctx, t, d, key); rec != "" {
		t.Errorf("SetLimit of a free key wrote the record %q", rec)
	}

	for _, c := range []struct {
		kind    string
		acquire func() (driver.Grant, error)
	}{
		{"plain lock", func() (driver.Grant, error) { return d.TryAcquire(ctx, limitReq(key, "holder")) }},
		{"read-write lock", func() (driver.Grant, error) {
			return d.TryAcquireShared(ctx, limitReq(key, "holder"), driver.Share{Mode: driver.Read, Weight: 1})
		}},
	} {
		g, err := c.acquire()
		if err != nil {
			t.Fatal(err)
		}
		wantConflict(t, d.SetLimit(ctx, key, 4), "SetLimit of a "+c.kind+"'s key", c.kind)
		if rec := limitRecordOf(ctx, t, d, key); rec != "" {
			t.Errorf("a refused SetLimit of a %s's key wrote the record %q", c.kind, rec)
		}
		releaseHold(ctx, t, d, key, "holder", g)
	}
}

// TestSetLimitWakesWaiters: a Subscribe of the key wakes when SetLimit
// changes its limit, and the waiter, once it reads, fails naming the new
// limit and leaves its place in line.
func TestSetLimitWakesWaiters(t *testing.T) {
	q := queueBehind(t, permitsOf(2, 2, false), permitsOf(2, 1, true))
	holder, waiter, ctx, key, g, wake := q.holder, q.waiter, q.ctx, q.key, q.held, q.wake
	drain(wake)
	if err := holder.SetLimit(ctx, key, 4); err != nil {
		t.Fatal(err)
	}
	awaitWake(ctx, t, wake)
	_, err := waiter.TryAcquireShared(ctx, limitReq(key, "waiter"), permitsOf(2, 1, true))
	wantConflict(t, err, "a wait with the old limit after SetLimit(4)", "4")
	st, err := holder.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Waiters != 0 {
		t.Errorf("Inspect counts %d waiters once the wait with the old limit failed", st.Waiters)
	}
	releaseHold(ctx, t, holder, key, "holder", g)
}

// TestClaimSeesLimitChange: a waiter whose view of the queue lets it in
// is not granted when SetLimit changed the limit since the view's read,
// even when the watch has yet to report it: its claim compares the limit
// record, and it reads again and fails naming the new limit.
func TestClaimSeesLimitChange(t *testing.T) {
	share := permitsOf(3, 2, true)
	q := queueBehind(t, permitsOf(3, 2, false), share)
	holder, waiter, ctx, key, g, wake := q.holder, q.waiter, q.ctx, q.key, q.held, q.wake
	waiter.mu.Lock()
	wkey := waiter.sess.shares["waiter"].key
	waiter.mu.Unlock()
	wvalue := sharedValue(limitReq(key, "waiter"), share)
	v := waiter.view(Dir(key), wkey, wvalue)
	if v == nil {
		t.Fatal("the queued waiter keeps no view: the test cannot tell")
	}
	if err := holder.SetLimit(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	releaseHold(ctx, t, holder, key, "holder", g)
	// Both the record's change and the release reach the waiter's
	// watches; then the view is made to lag: it lets the waiter in.
	for {
		awaitWake(ctx, t, wake)
		waiter.mu.Lock()
		done := v.lost && len(v.ahead) == 0
		waiter.mu.Unlock()
		if done {
			break
		}
	}
	waiter.mu.Lock()
	v.lost = false
	v.read = time.Now().Add(time.Hour) // not too old, however slow the test
	waiter.mu.Unlock()
	if waiter.view(Dir(key), wkey, wvalue) != v {
		t.Fatal("the lagging view is not the waiter's: the test cannot tell")
	}
	p, err := waiter.TryAcquireShared(ctx, limitReq(key, "waiter"), share)
	if err == nil {
		releaseHold(ctx, t, waiter, key, "waiter", p)
		t.Fatalf("a wait for 2 permits of 3 was granted (token %d) after SetLimit(1)", p.Token)
	}
	wantConflict(t, err, "a wait with the old limit whose view missed SetLimit(1)", "1", "3")
}

// queued is a request for a shared hold queued behind a holder, each on a
// driver of its own, the waiter subscribed to the key.
type queued struct {
	holder, waiter *etcdDriver
	ctx            context.Context
	key            string
	held           driver.Grant
	wake           <-chan struct{}
}

// queueBehind grants a hold of held on a free key, then queues a request
// of waits (Queue set) behind it, subscribed first so that it keeps a view.
func queueBehind(t *testing.T, held, waits driver.Share) queued {
	t.Helper()
	holder, ctx, key := sharedDriver(t)
	waiter, _, _ := sharedDriver(t)
	g, err := holder.TryAcquireShared(ctx, limitReq(key, "holder"), held)
	if err != nil {
		t.Fatal(err)
	}
	wake, stop, err := waiter.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if _, err := waiter.TryAcquireShared(ctx, limitReq(key, "waiter"), waits); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("%d permits behind %d of %d: %v", waits.Weight, held.Weight, held.Limit, err)
	}
	return queued{holder: holder, waiter: waiter, ctx: ctx, key: key, held: g, wake: wake}
}

// drain empties a Subscribe's channel of wake-ups sent so far.
func drain(wake <-chan struct{}) {
	select {
	case <-wake:
	default:
	}
}

// TestMinHoldEndTakesLimitRecord: the last holder's key, kept for a
// MinHold at its release, takes the limit record with it when the MinHold
// ends.
func TestMinHoldEndTakesLimitRecord(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	g, err := d.TryAcquireShared(ctx, limitReq(key, "kept"), permitsOf(2, 1, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetLimit(ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	if err := d.Keep(ctx, driver.Lease{Key: key, Owner: "kept", Token: g.Token, TTL: sharedTTL, State: g.State}, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for limitRecordOf(ctx, t, d, key) != "" {
		select {
		case <-ctx.Done():
			t.Fatal("the limit record outlived the MinHold of the key's last holder")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
