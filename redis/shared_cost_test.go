package redis

import (
	"context"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// TestSharedScriptCommands counts, through MONITOR, the commands of each
// script call of uncontended permits (the EVALSHA included), as
// TestUnfairScriptCommands does for locks. A permit of a key nobody holds
// reads the strings in one MGET and finds no holds hash, which says that
// nobody holds and nobody waits: it reads no line, and writes the fence,
// the hash and the hash's expiry. A permit beside another holder reads the
// line only when the hash says it may have waiters, and sets the hash's
// expiry only when its hold outlives the others. A release deletes its
// record, which deletes the hash with the last one, and finds in one HMGET
// that the hash has no fields of its own: nobody waits, and nothing is
// left to delete. A Locker that owns its client, given a cancellable ctx,
// runs the same commands: its attempt's tombstones are records of the
// holds hash, read in the same HGETALL (an MGET of three keys while they
// were strings of their own). The hash with its own
// kind and limit took 4 per release (an HLEN, then a DEL or an HEXISTS);
// the layout before the holds hash (a sorted set of holders and a meta
// hash) took 9, 4, 9 or 11, and 6.
func TestSharedScriptCommands(t *testing.T) {
	t.Parallel()
	addr := storeenv.Redis(t).Addr()
	c := newClient(t, addr)
	ctx := ctxFor(t, 60*time.Second)
	key := uniqueKey(t)
	t.Cleanup(func() { c.Del(context.Background(), sharedKeys(key)...) })
	l, d := newTestLocker(t, newClient(t, addr), locker.WithTTL(time.Minute))
	owned := newOwnedClient(clientOptions(addr))
	t.Cleanup(func() { _ = owned.Close() })
	lo, _ := newTestLocker(t, owned, locker.WithTTL(time.Minute))
	loadScripts(ctx, t, c, d.shareAcquire, d.shareRelease)
	sem, err := locker.NewSemaphore(l, key, 4)
	if err != nil {
		t.Fatal(err)
	}
	semo, err := locker.NewSemaphore(lo, key, 4)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := startMonitor(t, addr)
	p, err := sem.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err = semo.Acquire(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(cctx); err != nil {
		t.Fatal(err)
	}
	p, err = sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q, err := semo.Acquire(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	c.Exists(ctx, key) // ends the last script's lines in MONITOR
	steps := []struct {
		what string
		most int
	}{
		{"a permit of a free key", 7},
		{"releasing the last permit", 3},
		{"a permit of a free key, cancellable ctx, on a Locker that owns its client", 7},
		{"releasing the last permit, cancellable ctx, on a Locker that owns its client", 3},
		{"a permit of a free key", 7},
		{"a permit beside another holder, cancellable ctx, on a Locker that owns its client", 7},
		{"releasing a permit, another holder left", 3},
		{"releasing the last permit", 3},
	}
	got := m.scripts(ctx, t, key, len(steps))
	t.Logf("commands per script: %v", got)
	for i, s := range steps {
		if got[i] > s.most {
			t.Errorf("%s ran %d commands, want at most %d", s.what, got[i], s.most)
		}
	}
}

// TestNamesMatchName: fillNames, which makes several names in one allocation,
// makes each as name does, in both forms of the naming rules.
func TestNamesMatchName(t *testing.T) {
	kinds := []string{kindLock, kindFence, kindShareHolds, kindShareQueue, kindShareWaiters, kindChannel}
	for _, s := range []string{"k", "a:b", "x}y", "}", "{t}z", ""} {
		got := make([]string, len(kinds))
		fillNames(got, s, kinds...)
		for i, k := range kinds {
			if got[i] != name(k, s) {
				t.Errorf("fillNames(%q)[%d] = %q; want name(%q, %q) = %q", s, i, got[i], k, s, name(k, s))
			}
		}
	}
	st := newShareState("k")
	if len(st.keys) != 5 || st.channel != channelName("k") {
		t.Errorf("newShareState: keys %q, channel %v; want the five KEYS and the channel %q", st.keys, st.channel, channelName("k"))
	}
}
