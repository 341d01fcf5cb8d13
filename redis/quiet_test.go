package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// releaseQuiet runs release.lua for owner as the release of a lock taken
// at a fair first attempt does (quiet "1").
func (r scriptRunner) releaseQuiet(owner string) int64 {
	r.t.Helper()
	n, err := r.d.release.Run(r.ctx, r.c, scriptKeys(r.key), owner, channelName(r.key), 60000, "0", r.mode(), "1").Int64()
	if err != nil {
		r.t.Fatalf("release script: %v", err)
	}
	return n
}

// keyOnServer returns the test server's address, a client of it, a ctx of
// 30 s and a key of the test's own, whose names are deleted when t ends.
func keyOnServer(t *testing.T) (string, *goredis.Client, context.Context, string) {
	t.Helper()
	addr := storeenv.Redis(t).Addr()
	c := newClient(t, addr)
	key := uniqueKey(t)
	t.Cleanup(func() { c.Del(context.Background(), scriptKeys(key)...) })
	return addr, c, ctxFor(t, 30*time.Second), key
}

// TestUncontendedCommands counts, through MONITOR, the commands of a fair
// Locker's uncontended Lock+Unlock and TryLock+Unlock: each release of a
// lock taken at the first attempt runs three (GET of the lock,
// EXISTS of the queue and the waiters, DEL), the least a release that
// checks for waiters can.
func TestUncontendedCommands(t *testing.T) {
	t.Parallel()
	addr, c, ctx, key := keyOnServer(t)
	l, d := newTestLocker(t, newClient(t, addr), locker.WithTTL(time.Minute))
	loadScripts(ctx, t, c, d.acquire, d.release)
	m := startMonitor(t, addr)
	lk, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err = l.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx, key); err != nil { // its lines end the last release's
		t.Fatal(err)
	}
	counts := m.scripts(ctx, t, key, 4)
	t.Logf("commands per script (EVALSHA included): %v", counts)
	for _, i := range []int{1, 3} {
		if counts[i] > 4 {
			t.Errorf("release %d of a lock nobody waited for ran %d commands (EVALSHA included), want at most 4", i/2+1, counts[i])
		}
	}
}

// TestQuietReleaseHint: the quiet hint only orders the checks of a
// release. A holder that took the key at its first attempt still hands it
// over to a waiter that queued meanwhile, with a greater token (the quiet
// path reads no fence: the hand-over reads it), and still wakes a LockMulti
// recorded on the key (the waiters hash without a queue); a release
// without the hint on a key nobody waits for deletes it too.
func TestQuietReleaseHint(t *testing.T) {
	t.Parallel()
	r := newScriptRunner(t, map[string]string{"B": "LB"}, false)
	tokenA := r.acquire("A", "1")
	if tokenA <= 0 {
		t.Fatal("A could not take the free key")
	}
	if r.acquire("B", "1") >= 0 {
		t.Fatal("B was not queued behind A")
	}
	if n := r.releaseQuiet("A"); n != 1 || r.holder() != "B" {
		t.Fatalf("quiet release with B queued = %d, holder %q; want 1 and the key handed over to B", n, r.holder())
	}
	if tokenB := r.acquire("B", "2"); tokenB <= tokenA {
		t.Fatalf("B's token after the hand-over = %d, want more than A's %d", tokenB, tokenA)
	}
	if n := r.releaseQuiet("B"); n != 1 || r.holder() != "" {
		t.Fatalf("quiet release of B = %d, holder %q; want 1 and the key free", n, r.holder())
	}

	// A LockMulti of Locker LM found the key held: its record, no queue.
	if r.acquire("C", "0") <= 0 {
		t.Fatal("C could not take the free key")
	}
	sub := r.c.Subscribe(r.ctx, channelName(r.key)+":LM")
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(r.ctx); err != nil {
		t.Fatal(err)
	}
	waiters := name(kindWaiters, r.key)
	r.c.HSet(r.ctx, waiters, " watch LM w1", "3", " watched", "1")
	if n := r.releaseQuiet("C"); n != 1 || r.holder() != "" {
		t.Fatalf("quiet release with a LockMulti recorded = %d, holder %q; want 1 and the key free", n, r.holder())
	}
	msg, err := sub.ReceiveMessage(r.ctx)
	if err != nil || msg.Payload != "free w1 3" {
		t.Fatalf("the LockMulti's Locker got %v (%v); want \"free w1 3\"", msg, err)
	}
	if n, _ := r.c.Exists(r.ctx, waiters).Result(); n != 0 {
		t.Errorf("the waiters hash outlived its last record")
	}

	if r.acquire("D", "0") <= 0 {
		t.Fatal("D could not take the free key")
	}
	if n := r.releaseQuiet("E"); n != 0 || r.holder() != "D" {
		t.Fatalf("quiet release by a non-holder = %d, holder %q; want 0 and D's key left alone", n, r.holder())
	}
	if n := r.release("D", "0"); n != 1 || r.holder() != "" {
		t.Fatalf("release of D = %d, holder %q; want 1 and the key free", n, r.holder())
	}
}
