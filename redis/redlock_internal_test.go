package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestRedlockUndoKeepsLaterAttempts: the attempts of a waiting Lock share
// their owner, so the undo of an earlier attempt (a late one, arriving
// after a later attempt took the key) must not remove the later attempt's
// grants. Here attempt 1 left a grant on master 0; attempt 2 takes the key
// on all masters (master 0's grant taken over) and commits its token;
// attempt 1's undo then arrives: the lock must still be attempt 2's
// everywhere. (Three databases of the test server stand for the masters.)
func TestRedlockUndoKeepsLaterAttempts(t *testing.T) {
	d, masters, clients := redlockOnDatabases(t)
	ctx := t.Context()
	key := uniqueKey(t)
	owner := "owner" + strconv.FormatInt(time.Now().UnixNano(), 36)

	// Attempt 1's grant on master 0, marked m1.
	keys := []string{lockKey(key), fenceKey(key)}
	if err := d.acquire.Run(ctx, masters[0], keys, owner, 5000, "label", "nm1", 1).Err(); err != nil {
		t.Fatal(err)
	}
	// Attempt 2, same owner.
	g, err := d.TryAcquire(ctx, driver.Request{Key: key, Owner: owner, Label: "label", TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("attempt 2: %v", err)
	}
	// The requests that answered after the quorum's run on in the
	// background: without this wait, master 0 may not have seen attempt
	// 2's phase 1 yet and still hold attempt 1's mark (CI, docker suite).
	d.wg.Wait()
	// Every master holds attempt 2's grant: committed with its token on a
	// quorum, at least, and maybe still marked on a master whose commit
	// was not sent (kept, as the lock was granted).
	committed := owner + " " + strconv.FormatUint(g.Token, 10) + " "
	check := func(when string) {
		t.Helper()
		n := 0
		for i, c := range clients {
			v, err := c.Get(context.Background(), lockKey(key)).Result()
			switch {
			case err != nil || !strings.HasPrefix(v, owner+" ") || strings.HasPrefix(v, owner+" nm1 "):
				t.Errorf("%s: master %d holds %q (%v), want attempt 2's lock", when, i, v, err)
			case strings.HasPrefix(v, committed):
				n++
			}
		}
		if n < d.quorum {
			t.Errorf("%s: %d masters hold attempt 2's token %d, want at least %d", when, n, g.Token, d.quorum)
		}
	}
	check("after attempt 2")
	if failed := d.undoOn(ctx, key, owner, "nm1", "", nil); failed != nil {
		t.Fatalf("undo of attempt 1 failed on %v", failed)
	}
	check("after attempt 1's undo")
	if err := d.Release(ctx, driver.Lease{Key: key, Owner: owner}); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestRedlockLateAttemptKeepsCommittedLock: a waiting Lock's earlier
// attempt may answer on a master after a later attempt of the same owner
// took the key there and committed its token (a slow connection). That
// late phase 1 must leave the committed grant alone: its undo (the attempt
// failed, and the late grant looks like nobody's) would otherwise delete
// the key on that master, and the lock, counted on a quorum, would hold
// fewer masters than one (its Release answers ErrNotHeld, and another
// owner may take the key).
func TestRedlockLateAttemptKeepsCommittedLock(t *testing.T) {
	d, masters, clients := redlockOnDatabases(t)
	ctx := t.Context()
	key := uniqueKey(t)
	owner := "owner" + strconv.FormatInt(time.Now().UnixNano(), 36)
	keys := []string{lockKey(key), fenceKey(key)}

	// Attempt 2 takes the key on every master and commits its token there.
	g, err := d.TryAcquire(ctx, driver.Request{Key: key, Owner: owner, Label: "label", TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("attempt 2: %v", err)
	}
	d.wg.Wait() // the commits that came after the quorum's
	committed := owner + " " + strconv.FormatUint(g.Token, 10) + " "
	holds := func(c *goredis.Client) bool {
		v, err := c.Get(context.Background(), lockKey(key)).Result()
		return err == nil && strings.HasPrefix(v, committed)
	}
	// A master whose phase 1 answered after the quorum's holds a marked
	// grant: attempt 1 may take that over, as it is not counted.
	var before []bool
	for _, c := range clients {
		before = append(before, holds(c))
	}
	// Attempt 1's phase 1 reaches each master late, then its undo.
	for i, m := range masters {
		v, err := d.acquire.Run(ctx, m, keys, owner, 5000, "label", "nm1", 1).Slice()
		if err != nil {
			t.Fatalf("master %d: attempt 1's late phase 1: %v", i, err)
		}
		if r, err := parsePhase1(v); before[i] && (err != nil || r.granted) {
			t.Errorf("master %d: attempt 1's late phase 1 got %+v (%v), want a refusal: the key holds attempt 2's committed lock", i, r, err)
		}
	}
	if failed := d.undoOn(ctx, key, owner, "nm1", "", nil); failed != nil {
		t.Fatalf("undo of attempt 1 failed on %v", failed)
	}
	n := 0
	for i, c := range clients {
		switch {
		case holds(c):
			n++
		case before[i]:
			t.Errorf("master %d lost attempt 2's committed lock to attempt 1's late phase 1 and its undo", i)
		}
	}
	if n < d.quorum {
		t.Errorf("%d masters hold attempt 2's committed lock, want at least %d", n, d.quorum)
	}
	if err := d.Release(ctx, driver.Lease{Key: key, Owner: owner}); err != nil {
		t.Fatalf("Release of the lock attempt 2 took: %v", err)
	}
}

// redlockOnDatabases returns the driver of a Redlock Locker with TTL 5 s,
// whose masters are three databases of the test server, with its clients.
// The server may have started a moment ago and never held these locks: no
// restart delay.
func redlockOnDatabases(t *testing.T) (*redlockDriver, []Master, []*goredis.Client) {
	t.Helper()
	srv := storeenv.Redis(t)
	var masters []Master
	var clients []*goredis.Client
	for db := 4; db <= 6; db++ {
		o := clientOptions(srv.Addr())
		o.DB = db
		c := goredis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		masters, clients = append(masters, c), append(clients, c)
	}
	d, err := RedlockConfig{RestartDelay: time.Millisecond}.driver(masters)
	if err != nil {
		t.Fatal(err)
	}
	l, err := locker.New(d, locker.WithTTL(5*time.Second)) // runs Configure
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return d, masters, clients
}
