package redis

import (
	"context"
	_ "embed"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// layoutFixture starts a parallel test of layouts: a client, a Locker on
// it, a ctx and a key of the test's own.
func layoutFixture(t *testing.T) (*goredis.Client, locker.Locker, context.Context, string) {
	t.Parallel()
	c := newClient(t, storeenv.Redis(t).Addr())
	l, _ := newTestLocker(t, c)
	return c, l, ctxFor(t, 30*time.Second), uniqueKey(t)
}

// v1SharedAcquireLua is shared_acquire.lua of the layout before the holds
// hash, as a Locker of an older version runs it in a rolling upgrade.
//
//go:embed testdata/v1_shared_acquire.lua
var v1SharedAcquireLua string

// TestSharedOldLayout checks that Lockers of this version and of the
// version before the holds hash never grant beside each other's holders
// of one key. This version refuses a key held in the old layout (a sorted
// set of holders and a meta hash, written here by hand) with
// ErrInvalidOption naming the problem, on every kind of request (SetLimit:
// with an error naming it), and grants once those holds are gone; Inspect
// and List show those holds.
// The old version's acquire script fails on a key that this version
// holds, whatever it asks for.
func TestSharedOldLayout(t *testing.T) {
	c, l, ctx, key := layoutFixture(t)
	oldKeys := []string{name(kindLock, key), name(kindFence, key), name("sh", key), name("sm", key), name("sq", key), name("sw", key)}
	t.Cleanup(func() { c.Del(t.Context(), oldKeys...) })

	// A holder of the only permit of a semaphore of 1, in the old layout.
	pipe := c.TxPipeline()
	pipe.ZAdd(ctx, oldKeys[2], goredis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "old-holder"})
	pipe.HSet(ctx, oldKeys[3], " kind", "permits", " limit", "1", "old-holder", "permits 1 7 0 0 old")
	pipe.PExpire(ctx, oldKeys[2], time.Hour)
	pipe.PExpire(ctx, oldKeys[3], time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := locker.Inspect(ctx, l, key); err != nil || st.Limit != 1 || len(st.Holders) != 1 || st.Holders[0].Label != "old" || st.Holders[0].Token != 7 {
		t.Errorf("Inspect of a key held in the old layout: %+v, %v; want the limit 1 and its holder \"old\" with token 7", st, err)
	}
	listed := 0
	for ks, err := range locker.List(ctx, l, key) {
		if err != nil {
			t.Fatalf("List beside a key held in the old layout: %v", err)
		}
		if ks.Key == key && len(ks.Holders) == 1 {
			listed++
		}
	}
	if listed != 1 {
		t.Errorf("List showed the key held in the old layout with its holder %d times, want once", listed)
	}
	one, _ := locker.NewSemaphore(l, key, 1)
	two, _ := locker.NewSemaphore(l, key, 2)
	rw, _ := locker.NewRWMutex(l, key)
	for what, call := range map[string]func() (locker.Lock, error){
		"TryAcquire, limit 1": func() (locker.Lock, error) { return one.TryAcquire(ctx) },
		"Acquire, limit 1":    func() (locker.Lock, error) { return one.Acquire(ctx) },
		"TryAcquire, limit 2": func() (locker.Lock, error) { return two.TryAcquire(ctx) },
		"RLock":               func() (locker.Lock, error) { return rw.RLock(ctx) },
		"Lock":                func() (locker.Lock, error) { return l.Lock(ctx, key) },
		"TryLock":             func() (locker.Lock, error) { return l.TryLock(ctx, key) },
	} {
		lk, err := call()
		if err == nil {
			_ = lk.Unlock(ctx)
			t.Errorf("%s granted beside a holder of the only permit in the old layout; want a refusal", what)
			continue
		}
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "older version") {
			t.Errorf("%s on a key held in the old layout: got %v, want ErrInvalidOption naming the older version's layout", what, err)
		}
	}
	if err := one.SetLimit(ctx, 3); err == nil || !strings.Contains(err.Error(), "older version") {
		t.Errorf("SetLimit on a key held in the old layout: %v; want an error naming the older version's layout", err)
	}
	if m, err := locker.LockMulti(ctx, l, []string{key + "-other", key}); err == nil {
		_ = m.Unlock(ctx)
		t.Errorf("LockMulti granted beside a holder of the only permit in the old layout; want a refusal")
	} else if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "older version") {
		t.Errorf("LockMulti on a key held in the old layout: got %v, want ErrInvalidOption naming the older version's layout", err)
	}
	if err := c.Del(ctx, oldKeys[2], oldKeys[3]).Err(); err != nil {
		t.Fatal(err)
	}

	// A holder of the only permit in this layout; the old script asks.
	p, err := one.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire once the old layout's holds are gone: %v", err)
	}
	defer func() { _ = p.Unlock(ctx) }()
	old := goredis.NewScript(v1SharedAcquireLua)
	for _, args := range [][]any{
		{"old-1", 60000, "old", 60000, "permits", "1", "1", "0", "lid", ""},
		{"old-2", 60000, "old", 60000, "permits", "1", "1", "1", "lid", ""},
		{"old-3", 60000, "old", 60000, "permits", "2", "1", "0", "lid", ""},
		{"old-4", 60000, "old", 60000, "read", "0", "1", "1", "lid", ""},
	} {
		v, err := old.Run(ctx, c, oldKeys, args...).Result()
		if err == nil {
			t.Errorf("the old acquire script (%s, limit %v, queue %v) answered %v on a key held in this layout; want an error", args[4], args[5], args[7], v)
			if tok, ok := v.(int64); ok && tok > 0 {
				t.Errorf("the old acquire script granted a second permit of a semaphore of 1 (token %s)", strconv.FormatInt(tok, 10))
			}
		} else if !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("the old acquire script failed with %v; want WRONGTYPE", err)
		}
	}
	if n := c.HLen(ctx, oldKeys[2]).Val(); n != 1 {
		t.Errorf("the holds hash has %d fields after the old script's attempts, want 1 (the holder)", n)
	}
}

// The scripts of the version before the hold records carried the key's
// kind and limit (the holds hash had " kind" and " limit" fields of its
// own), as a Locker of that version runs them in a rolling upgrade.
var (
	//go:embed testdata/v2_shared_acquire.lua
	v2SharedAcquireLua string
	//go:embed testdata/v2_shared_release.lua
	v2SharedReleaseLua string
)

// TestSharedRecordLayout checks the hold records that carry the key's kind
// and limit, beside Lockers of the version before them, whose holds hash
// had " kind" and " limit" fields of its own and which deleted a hash left
// with only those: a permit of this version writes its record alone, and
// Redis deletes the hash with its last record; a key's limit is found in
// either layout, so that a request with another limit is refused; Lockers
// of both versions never grant more permits than the limit between them,
// an old Locker's release deletes no hold of this version, and the last
// release of a mixed hash deletes it.
func TestSharedRecordLayout(t *testing.T) {
	c, l, ctx, key := layoutFixture(t)
	ks := sharedKeys(key)
	t.Cleanup(func() { c.Del(t.Context(), ks...) })
	oldAcquire, oldRelease := goredis.NewScript(v2SharedAcquireLua), goredis.NewScript(v2SharedReleaseLua)
	acquireOld := func(owner, limit string) (any, error) {
		return oldAcquire.Run(ctx, c, ks, owner, 60000, "old", 60000, "permits", limit, "1", "0", "lid", "").Result()
	}
	releaseOld := func(owner string) {
		t.Helper()
		if n, err := oldRelease.Run(ctx, c, ks, owner, "", "release", 0).Int64(); err != nil || n != 1 {
			t.Fatalf("the old release script for %s: %v, %v; want 1", owner, n, err)
		}
	}
	two, _ := locker.NewSemaphore(l, key, 2)
	three, _ := locker.NewSemaphore(l, key, 3)

	// This version's permit: its record alone, which carries the limit.
	a, err := two.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := c.HKeys(ctx, ks[2]).Val(); len(f) != 1 {
		t.Errorf("the holds hash of one permit has fields %q, want its holder's alone", f)
	}
	if st, err := locker.Inspect(ctx, l, key); err != nil || st.Limit != 2 || len(st.Holders) != 1 {
		t.Errorf("Inspect of a permit in a hash of records alone: %+v, %v; want the limit 2 and one holder", st, err)
	}
	if p, err := three.TryAcquire(ctx); err == nil {
		_ = p.Unlock(ctx)
		t.Errorf("a semaphore of 3 was granted beside a permit of a semaphore of 2; want a conflict")
	} else if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "2 permits") {
		t.Errorf("a semaphore of 3 beside a permit of 2: %v; want ErrInvalidOption naming the limit 2", err)
	}
	if lk, err := l.TryLock(ctx, key); err == nil {
		_ = lk.Unlock(ctx)
		t.Errorf("a plain lock was granted on a key with a permit; want a conflict")
	} else if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "2 permits") {
		t.Errorf("a plain lock beside a permit of a semaphore of 2: %v; want ErrInvalidOption naming the semaphore", err)
	}

	// An old Locker takes the second permit, and writes the hash's own
	// fields; neither version grants a third.
	if v, err := acquireOld("old-1", "2"); err != nil {
		t.Fatalf("the old acquire script beside one permit of 2: %v", err)
	} else if tok, ok := v.(int64); !ok || tok <= 0 {
		t.Fatalf("the old acquire script beside one permit of 2 answered %v; want a grant", v)
	}
	if v, err := acquireOld("old-2", "2"); err != nil {
		t.Fatal(err)
	} else if tok, ok := v.(int64); ok && tok > 0 {
		t.Errorf("the old acquire script granted a third permit of a semaphore of 2 (token %d)", tok)
	}
	if p, err := two.TryAcquire(ctx); err == nil {
		_ = p.Unlock(ctx)
		t.Errorf("a third permit of a semaphore of 2 was granted beside an old Locker's")
	}
	// The old Locker leaves: the hold of this version stays.
	releaseOld("old-1")
	if st, err := locker.Inspect(ctx, l, key); err != nil || len(st.Holders) != 1 || st.Limit != 2 {
		t.Errorf("Inspect after the old Locker's release: %+v, %v; want this version's holder and the limit 2", st, err)
	}
	b, err := two.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the second permit after the old Locker's release: %v", err)
	}
	if p, err := two.TryAcquire(ctx); err == nil {
		_ = p.Unlock(ctx)
		t.Errorf("a third permit of a semaphore of 2 was granted after the old Locker's release")
	}
	if err := errors.Join(a.Unlock(ctx), b.Unlock(ctx)); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, ks[2]).Val(); n != 0 {
		t.Errorf("the holds hash with the old Locker's fields outlived its last permit (fields %q)", c.HKeys(ctx, ks[2]).Val())
	}

	// A key an old Locker holds: its limit rules, and this version's
	// release of the last permit deletes the hash.
	if _, err := acquireOld("old-3", "2"); err != nil {
		t.Fatal(err)
	}
	if p, err := three.TryAcquire(ctx); err == nil {
		_ = p.Unlock(ctx)
		t.Errorf("a semaphore of 3 was granted beside an old Locker's permit of a semaphore of 2")
	}
	a, err = two.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a permit beside an old Locker's: %v", err)
	}
	releaseOld("old-3")
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, ks[2]).Val(); n != 0 {
		t.Errorf("the holds hash with the old Locker's fields outlived its last permit (fields %q)", c.HKeys(ctx, ks[2]).Val())
	}
}

// The scripts of the version before tombstones moved into the holds hash
// (a cut attempt's tombstone was a string of its own), as a Locker of that
// version runs them in a rolling upgrade.
var (
	//go:embed testdata/v3_shared_acquire.lua
	v3SharedAcquireLua string
	//go:embed testdata/v3_shared_release.lua
	v3SharedReleaseLua string
)

// TestSharedTombLayout checks the tombstones that a cut shared attempt's
// cleanup writes into the holds hash (" cut"): an attempt of the buried
// owner, or of the buried Locker, takes nothing while the others take
// permits as if the tombstone were not there; a hash of tombstones alone
// is a free key to Inspect, a plain lock and another limit; a release
// that leaves a hash with its own fields and a tombstone drops the fields
// and keeps the tombstone. Lockers of the version before (tombstones of
// their own) count no tombstone as a holder, grant no more than the limit
// beside it, and their releases keep it.
func TestSharedTombLayout(t *testing.T) {
	c, l, ctx, key := layoutFixture(t)
	ks := sharedKeys(key)
	t.Cleanup(func() { c.Del(t.Context(), append(ks, lockKey(key))...) })
	acq, rel := goredis.NewScript(includeShared(shareAcquireLua)), goredis.NewScript(includeShared(shareReleaseLua))
	oldAcq, oldRel := goredis.NewScript(v3SharedAcquireLua), goredis.NewScript(v3SharedReleaseLua)
	// attempt runs an acquire script for owner of Locker lid, for a permit
	// of a semaphore of limit; queue "1" waits in line.
	attempt := func(s *goredis.Script, owner, lid, limit, queue string) any {
		t.Helper()
		v, err := s.Run(ctx, c, ks, owner, 60000, "t", 60000, "permits", limit, "1", queue, lid, "").Result()
		if err != nil {
			t.Fatalf("acquire for %s: %v", owner, err)
		}
		return v
	}
	granted := func(v any) bool { tok, ok := v.(int64); return ok && tok > 0 }
	release := func(s *goredis.Script, owner, op string, args ...any) int64 {
		t.Helper()
		n, err := s.Run(ctx, c, ks, append([]any{owner, "", op}, args...)...).Int64()
		if err != nil {
			t.Fatalf("%s for %s: %v", op, owner, err)
		}
		return n
	}
	buried := func(owner, lid string) {
		t.Helper()
		if v := attempt(acq, owner, lid, "2", "0"); granted(v) {
			t.Errorf("an attempt of owner %s, Locker %s took a permit beside its tombstone (%v)", owner, lid, v)
		}
	}
	free := func(what string) {
		t.Helper()
		if st, err := locker.Inspect(ctx, l, key); err != nil || st.Held || len(st.Holders) != 0 || st.Limit != 0 {
			t.Errorf("Inspect of %s: %+v, %v; want a free key", what, st, err)
		}
		lk, err := l.TryLock(ctx, key)
		if err != nil {
			t.Errorf("a plain lock on %s: %v; want a grant", what, err)
			return
		}
		_ = lk.Unlock(ctx)
	}

	// A tombstone of an owner that held nothing, and one of a Locker.
	if n := release(rel, "gone", "bury", 60000, "gone"); n != 0 {
		t.Errorf("bury of an owner that neither waited nor held answered %d, want 0", n)
	}
	release(rel, "gone-too", "bury", 60000, "closed-lid")
	if f := c.HKeys(ctx, ks[2]).Val(); len(f) != 1 || f[0] != " cut" {
		t.Fatalf("the holds hash after two burials has fields %q, want \" cut\" alone", f)
	}
	free("a hash of tombstones alone")
	buried("gone", "lid")
	buried("someone", "closed-lid")

	// The version before counts the tombstones as no holder: two permits
	// of 2, not a third; this version agrees, and its buried attempts stay
	// refused after the old Lockers' releases.
	if v := attempt(oldAcq, "old-1", "lid", "2", "0"); !granted(v) {
		t.Fatalf("the old acquire script beside tombstones alone answered %v; want a grant", v)
	}
	if v := attempt(acq, "new-1", "lid", "2", "0"); !granted(v) {
		t.Fatalf("the acquire script beside an old permit and tombstones answered %v; want a grant", v)
	}
	if v := attempt(oldAcq, "old-2", "lid", "2", "0"); granted(v) {
		t.Errorf("the old acquire script granted a third permit of 2 beside tombstones (%v)", v)
	}
	buried("gone", "lid")
	release(oldRel, "old-1", "release", 0)
	release(rel, "new-1", "release", 0)
	if f := c.HKeys(ctx, ks[2]).Val(); len(f) != 1 || f[0] != " cut" {
		t.Errorf("the holds hash after the last release has fields %q, want \" cut\" alone", f)
	}
	buried("gone", "lid")

	// A line gives the hash fields of its own. A waiter's burial takes it
	// out of line; the holder's release then leaves the tombstones alone,
	// and the key may become a plain lock or a semaphore of another limit.
	if v := attempt(acq, "holder", "lid", "1", "0"); !granted(v) {
		t.Fatalf("a permit of 1: %v", v)
	}
	if v := attempt(acq, "waiter", "lid-w", "1", "1"); granted(v) {
		t.Fatalf("a second permit of 1 was granted: %v", v)
	}
	if f := c.HKeys(ctx, ks[2]).Val(); !slices.Contains(f, " kind") || !slices.Contains(f, " q") {
		t.Fatalf("the holds hash of a key with a waiter has fields %q, want \" kind\" and \" q\" among them", f)
	}
	if n := release(rel, "waiter", "bury", 60000, "waiter"); n != 1 {
		t.Errorf("bury of a waiter answered %d, want 1", n)
	}
	if n := c.ZCard(ctx, ks[3]).Val(); n != 0 {
		t.Errorf("the line has %d waiters after the only waiter's burial, want 0", n)
	}
	release(rel, "holder", "release", 0)
	f := c.HKeys(ctx, ks[2]).Val()
	slices.Sort(f)
	if len(f) != 1 || f[0] != " cut" {
		t.Errorf("the holds hash after its last holder's release has fields %q, want \" cut\" alone", f)
	}
	free("a hash of tombstones, its line gone")
	buried("waiter", "lid-w")
	buried("gone", "lid")
	if v := attempt(acq, "other-limit", "lid", "3", "0"); !granted(v) {
		t.Errorf("a semaphore of 3 after a semaphore of 1 left only tombstones: %v; want a grant", v)
	}
	if c.PTTL(ctx, ks[2]).Val() < 50*time.Second {
		t.Errorf("the holds hash expires in %v, before its tombstones", c.PTTL(ctx, ks[2]).Val())
	}
}
