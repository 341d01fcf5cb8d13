package redis

import (
	_ "embed"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

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
	t.Parallel()
	c := newClient(t, storeenv.Redis(t).Addr())
	l, _ := newTestLocker(t, c)
	ctx := ctxFor(t, 30*time.Second)
	key := uniqueKey(t)
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
	if n := c.HLen(ctx, oldKeys[2]).Val(); n != 3 {
		t.Errorf("the holds hash has %d fields after the old script's attempts, want 3 (kind, limit, the holder)", n)
	}
}
