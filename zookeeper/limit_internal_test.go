package zookeeper

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// limitDrivers returns n drivers under one root, each on a session of its
// own, their connections, and a ctx for the test. Each has taken a lock
// once, so that it knows its ACL: a first create's ACL probe would make a
// SetLimit list the key again, which would hide the races the tests set up.
func limitDrivers(t *testing.T, n int) ([]*zkDriver, []*zk.Conn, context.Context) {
	root := "/locker-limit-" + rand.Text()[:10]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	ds, conns := make([]*zkDriver, n), make([]*zk.Conn, n)
	for i := range n {
		ds[i], conns[i] = rootDriver(t, root)
		req := limitRequest("probe")
		req.Key = "probe"
		g, err := ds[i].TryAcquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := ds[i].Release(ctx, driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: sharedTTL, State: g.State}); err != nil {
			t.Fatal(err)
		}
	}
	return ds, conns, ctx
}

func limitRequest(owner string) driver.Request {
	return driver.Request{Key: "k", Owner: owner, Label: owner, TTL: sharedTTL, Lost: func(error) {}}
}

func permitsOf(limit, weight int) driver.Share {
	return driver.Share{Mode: driver.Permits, Limit: limit, Weight: weight}
}

// take grants owner a shared hold of s on key "k" through d, or fails t.
func take(ctx context.Context, t *testing.T, d *zkDriver, owner string, s driver.Share) driver.Grant {
	t.Helper()
	g, err := d.TryAcquireShared(ctx, limitRequest(owner), s)
	if err != nil {
		t.Fatalf("%s: TryAcquireShared(%+v): %v", owner, s, err)
	}
	return g
}

func give(ctx context.Context, t *testing.T, d *zkDriver, owner string, g driver.Grant) {
	t.Helper()
	if err := d.Release(ctx, driver.Lease{Key: "k", Owner: owner, Token: g.Token, TTL: sharedTTL, State: g.State}); err != nil {
		t.Errorf("release %s: %v", owner, err)
	}
}

// records lists the limit records of key "k".
func records(t *testing.T, d *zkDriver) []record {
	t.Helper()
	c, _, err := d.conn.Children(d.parentOf("k"))
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	return recordsOf(c)
}

// eventually polls cond until it holds, for at most 10 s (a generous
// bound: the deletions it waits for are one request each).
func eventually(ctx context.Context, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// staleRecord leaves key "k" of ds[0]'s root with a limit record of 6 and
// no lock node: the holder's session ends after SetLimit, and the session
// of the Locker that wrote the record ends first, so that nobody deletes it.
func staleRecord(ctx context.Context, t *testing.T, ds []*zkDriver, conns []*zk.Conn) {
	t.Helper()
	take(ctx, t, ds[0], "holder", permitsOf(4, 1))
	if err := ds[1].SetLimit(ctx, "k", 6); err != nil {
		t.Fatalf("SetLimit(6) of a held semaphore of 4: %v", err)
	}
	conns[1].Close() // the writer's session ends first: it cannot delete the record
	conns[0].Close() // the holder's session ends
	if rs := records(t, ds[2]); len(rs) != 1 || rs[0].limit != 6 {
		t.Fatalf("records after the holder's session ended: %+v; want one, of 6", rs)
	}
}

// TestStaleLimitRecord: a limit record left when the semaphore's last
// holder's session ended rules no later holder, whatever its limit, and
// is deleted by the next Locker that lists the key.
func TestStaleLimitRecord(t *testing.T) {
	ds, conns, ctx := limitDrivers(t, 3)
	staleRecord(ctx, t, ds, conns)
	g := take(ctx, t, ds[2], "later", permitsOf(3, 3))
	if !eventually(ctx, func() bool { return len(records(t, ds[2])) == 0 }) {
		t.Errorf("a stale limit record is still there: %+v", records(t, ds[2]))
	}
	st, err := ds[2].Inspect(ctx, "k")
	if err != nil || st.Limit != 3 {
		t.Errorf("Inspect = %+v, %v; want the later holder's limit 3", st, err)
	}
	give(ctx, t, ds[2], "later", g)
}

// TestStaleLimitRecordPlainTryLock: a stale limit record keeps no
// TryLock of the key from taking it.
func TestStaleLimitRecordPlainTryLock(t *testing.T) {
	ds, conns, ctx := limitDrivers(t, 3)
	staleRecord(ctx, t, ds, conns)
	g, err := ds[2].TryAcquire(ctx, limitRequest("plain"))
	if err != nil {
		t.Fatalf("TryLock of a key with a stale limit record and no lock node: %v", err)
	}
	if rs := records(t, ds[2]); len(rs) != 0 {
		t.Errorf("a stale limit record is still there after a TryLock took the key: %+v", rs)
	}
	give(ctx, t, ds[2], "plain", g)
}

// TestLimitRecordGoesWithLastHolder: the Locker that wrote a limit record
// deletes it once the holders it ruled are gone, so the key's node is
// left empty (ZooKeeper then deletes it).
func TestLimitRecordGoesWithLastHolder(t *testing.T) {
	ds, _, ctx := limitDrivers(t, 2)
	a := take(ctx, t, ds[0], "a", permitsOf(2, 1))
	b := take(ctx, t, ds[0], "b", permitsOf(2, 1))
	if err := ds[1].SetLimit(ctx, "k", 5); err != nil {
		t.Fatalf("SetLimit(5): %v", err)
	}
	c := take(ctx, t, ds[0], "c", permitsOf(5, 3))
	give(ctx, t, ds[0], "a", a)
	give(ctx, t, ds[0], "b", b)
	if !eventually(ctx, func() bool { return len(records(t, ds[0])) == 0 }) {
		t.Errorf("the limit record outlived the holders it ruled: %+v", records(t, ds[0]))
	}
	give(ctx, t, ds[0], "c", c)
	children, _, err := ds[0].conn.Children(ds[0].parentOf("k"))
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	if len(children) != 0 {
		t.Errorf("the key's node kept children after its last holder left: %v", children)
	}
}

// TestSetLimitConflicts: SetLimit refuses a key held as a plain lock or a
// read-write lock with ErrConflict, and writes nothing on a free key.
func TestSetLimitConflicts(t *testing.T) {
	ds, _, ctx := limitDrivers(t, 2)
	if err := ds[1].SetLimit(ctx, "k", 3); err != nil {
		t.Fatalf("SetLimit of a free key: %v", err)
	}
	if rs := records(t, ds[1]); len(rs) != 0 {
		t.Errorf("SetLimit of a free key left records: %+v", rs)
	}
	for _, c := range []struct {
		what  string
		take  func() (driver.Grant, error)
		names string
	}{
		{"a plain lock", func() (driver.Grant, error) { return ds[0].TryAcquire(ctx, limitRequest("plain")) }, "plain lock"},
		{"a read-write lock", func() (driver.Grant, error) {
			return ds[0].TryAcquireShared(ctx, limitRequest("reader"), driver.Share{Mode: driver.Read, Weight: 1})
		}, "read-write lock"},
	} {
		g, err := c.take()
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		err = ds[1].SetLimit(ctx, "k", 3)
		if !errors.Is(err, driver.ErrConflict) || !strings.Contains(err.Error(), c.names) {
			t.Errorf("SetLimit of a key held as %s: got %v, want ErrConflict naming it", c.what, err)
		}
		if rs := records(t, ds[1]); len(rs) != 0 {
			t.Errorf("SetLimit of a key held as %s left records: %+v", c.what, rs)
		}
		give(ctx, t, ds[0], c.what, g)
	}
}

// TestSetLimitRacesAcquire: the holder a SetLimit listed leaves and a
// plain lock takes the key before SetLimit writes: SetLimit must see it
// (ErrConflict), not write a record over the plain lock.
func TestSetLimitRacesAcquire(t *testing.T) {
	ds, _, ctx := limitDrivers(t, 2)
	p := take(ctx, t, ds[0], "permit", permitsOf(2, 1))
	var plain driver.Grant
	ds[1].hooks.beforeLimitWrite = func() {
		ds[1].hooks.beforeLimitWrite = nil
		give(ctx, t, ds[0], "permit", p)
		var err error
		if plain, err = ds[0].TryAcquire(ctx, limitRequest("plain")); err != nil {
			t.Errorf("TryLock of the key its permit left: %v", err)
		}
	}
	err := ds[1].SetLimit(ctx, "k", 3)
	if !errors.Is(err, driver.ErrConflict) {
		t.Errorf("SetLimit raced by a plain lock that took the key: got %v, want ErrConflict", err)
	}
	if rs := records(t, ds[1]); len(rs) != 0 {
		t.Errorf("SetLimit raced by a plain lock left records: %+v", rs)
	}
	if plain.State != nil {
		give(ctx, t, ds[0], "plain", plain)
	}
}

// TestSetLimitRacesSetLimit: of two SetLimits that both find no record,
// the later write rules, and the earlier record is deleted.
func TestSetLimitRacesSetLimit(t *testing.T) {
	ds, _, ctx := limitDrivers(t, 3)
	h := take(ctx, t, ds[0], "holder", permitsOf(2, 1))
	ds[1].hooks.beforeLimitWrite = func() {
		ds[1].hooks.beforeLimitWrite = nil
		if err := ds[2].SetLimit(ctx, "k", 7); err != nil {
			t.Errorf("the racing SetLimit(7): %v", err)
		}
	}
	if err := ds[1].SetLimit(ctx, "k", 5); err != nil {
		t.Fatalf("SetLimit(5): %v", err)
	}
	_, err := ds[0].TryAcquireShared(ctx, limitRequest("seven"), permitsOf(7, 1))
	if !errors.Is(err, driver.ErrConflict) || !strings.Contains(err.Error(), "5") {
		t.Errorf("a permit of 7 after SetLimit(7) then SetLimit(5): got %v, want ErrConflict naming 5", err)
	}
	g := take(ctx, t, ds[0], "five", permitsOf(5, 1))
	if !eventually(ctx, func() bool { return len(records(t, ds[0])) == 1 }) {
		t.Errorf("records after two SetLimits: %+v; want the later one only", records(t, ds[0]))
	}
	give(ctx, t, ds[0], "five", g)
	give(ctx, t, ds[0], "holder", h)
}

// TestSetLimitBetweenListingAndClaim: a waiter's listing is served before
// its claim, and SetLimit writes a record in between. The waiter fits by
// the listing, but its claim comes after the record: it must fail naming
// the new limit, not be granted with the old one. A later arrival queued
// behind the waiter makes it claim (see waiter); the claim follows the
// listing.
func TestSetLimitBetweenListingAndClaim(t *testing.T) {
	ds, _, ctx, h, queued, r := lineUp(t, 3, 2, 2, 1)
	later := queue(ctx, t, ds[0], "later", queued)
	give(ctx, t, ds[0], "holder", h)
	listed := make(chan struct{})
	ds[1].hooks.afterListing = func() {
		if err := ds[2].SetLimit(ctx, "k", 1); err != nil {
			t.Errorf("SetLimit(1) between the waiter's listing and its claim: %v", err)
		}
		close(listed)
	}
	ds[1].hooks.beforeClaim = func() { <-listed }
	g, err := ds[1].TryAcquireShared(ctx, limitRequest("waiter"), queued)
	if err == nil {
		t.Errorf("a waiter with the old limit 2 was granted (token %d) by a claim made after SetLimit(1)", g.Token)
		give(ctx, t, ds[1], "waiter", g)
	} else if !errors.Is(err, driver.ErrConflict) || !strings.Contains(err.Error(), "1 permits") {
		t.Errorf("a waiter with the old limit 2 whose claim came after SetLimit(1): got %v, want ErrConflict naming 1", err)
	}
	_ = r.Cleanup(ctx)
	_ = later.Cleanup(ctx)
}

// TestSetLimitAfterHandOnListing: a waiter handed on by its listing (no
// write: nothing wrote the key's node since its create) is granted at that
// listing, under the limit the listing showed; a SetLimit after it does not
// undo the grant, as it takes no permit away from a holder. Its token is its
// node's czxid.
func TestSetLimitAfterHandOnListing(t *testing.T) {
	ds, _, ctx, h, queued, r := lineUp(t, 3, 2, 2, 1)
	czxid := czxidOf(t, ds[1], "waiter")
	give(ctx, t, ds[0], "holder", h)
	ds[1].hooks.afterListing = func() {
		if err := ds[2].SetLimit(ctx, "k", 1); err != nil {
			t.Errorf("SetLimit(1) after the waiter's listing: %v", err)
		}
	}
	ds[1].hooks.beforeClaim = func() { t.Error("a waiter handed on by its listing claimed") }
	g, err := ds[1].TryAcquireShared(ctx, limitRequest("waiter"), queued)
	if err != nil {
		t.Fatalf("a waiter whose listing showed it fits, SetLimit(1) after it: %v", err)
	}
	if g.Token != uint64(czxid) {
		t.Errorf("a waiter handed on got token %d, want its node's czxid %d", g.Token, czxid)
	}
	give(ctx, t, ds[1], "waiter", g)
	_ = r.Cleanup(ctx)
}

// lineUp returns n drivers, their connections and a ctx (see
// limitDrivers), a permit of weight held of a semaphore of limit on key "k",
// taken by ds[0] as "holder", and a request of weight waiting, queued
// behind it by ds[1] as "waiter": its share and its refusal's Residue.
func lineUp(t *testing.T, n, limit, held, waiting int) ([]*zkDriver, []*zk.Conn, context.Context, driver.Grant, driver.Share, *driver.Residue) {
	t.Helper()
	ds, conns, ctx := limitDrivers(t, n)
	h := take(ctx, t, ds[0], "holder", permitsOf(limit, held))
	queued := permitsOf(limit, waiting)
	queued.Queue = true
	return ds, conns, ctx, h, queued, queue(ctx, t, ds[1], "waiter", queued)
}

// queue queues owner's request of s on key "k" through d, and returns the
// refusal's Residue, or fails t.
func queue(ctx context.Context, t *testing.T, d *zkDriver, owner string, s driver.Share) *driver.Residue {
	t.Helper()
	_, err := d.TryAcquireShared(ctx, limitRequest(owner), s)
	var r *driver.Residue
	if !errors.Is(err, driver.ErrHeld) || !errors.As(err, &r) {
		t.Fatalf("%s: a queued request of a full semaphore: got %v, want a Residue matching ErrHeld", owner, err)
	}
	return r
}

// czxidOf returns the czxid of the node of owner, a request d queued.
func czxidOf(t *testing.T, d *zkDriver, owner string) int64 {
	t.Helper()
	d.mu.Lock()
	node := d.queued[owner].node
	d.mu.Unlock()
	_, st, err := d.conn.Exists(node)
	if err != nil || st == nil {
		t.Fatalf("the node %q of %s: %v", node, owner, err)
	}
	return st.Czxid
}
