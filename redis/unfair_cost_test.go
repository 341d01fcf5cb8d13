package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"

	"github.com/golocker/locker/internal/storeenv"
)

// TestUnfairScriptCommands counts, through MONITOR, the commands of each
// script call of an unfair hand-off on one key: a release that wakes the
// first waiter reads its record, the wake-up field and the watch mark in
// one HMGET, an attempt on a free key looks at the queue only to leave it
// (an attempt after the first of a waiting Lock), and an attempt of a
// queued waiter whose record is recent ("k<n>") writes nothing.
// (A polling waiter's "p<n>": TestUnfairPollingAttempt.)
func TestUnfairScriptCommands(t *testing.T) {
	t.Parallel()
	r := newScriptRunner(t, map[string]string{"B": "LB"}, true)
	loadScripts(r.ctx, t, r.c, r.d.acquire, r.d.release)
	m := startMonitor(t, storeenv.Redis(t).Addr())
	if r.acquire("A", "0") <= 0 {
		t.Fatal("A could not take the free key")
	}
	if r.acquire("B", "1") >= 0 {
		t.Fatal("B was not queued behind A")
	}
	if r.acquire("B", "k2") >= 0 {
		t.Fatal("B's attempt with a recent record took the held key")
	}
	r.fresh() // B arrived just now: the release wakes it, hands nothing over
	if r.release("A", "0") != 1 {
		t.Fatal("A could not release")
	}
	if r.acquire("C", "1") <= 0 {
		t.Fatal("C's first attempt could not take the free key B waits for")
	}
	// B's wake-up stays recent, however long the calls take.
	now, err := r.c.Time(r.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	r.c.HSet(r.ctx, name(kindWaiters, r.key), " woke", fmt.Sprintf("%d B", now.Add(time.Hour).UnixMicro()))
	if r.release("C", "0") != 1 {
		t.Fatal("C could not release")
	}
	if r.acquire("B", "3") <= 0 {
		t.Fatal("B's second attempt could not take the free key")
	}
	if r.release("B", "0") != 1 || r.holder() != "" {
		t.Fatal("B could not release") // holder's GET also ends the last script's lines in MONITOR
	}
	steps := []struct {
		what string
		most int
	}{
		{"taking a free key nobody waits for", 6},
		{"finding the key held, queueing", 9},
		{"finding the key held, queued with a recent record", 4},
		{"releasing, waking the first waiter", 8},
		{"taking a free key a waiter waits for, at the first attempt", 6},
		{"releasing, the first waiter woken just before", 6},
		{"taking a free key, leaving the queue", 8},
		{"releasing a key nobody waits for", 5},
	}
	got := m.scripts(r.ctx, t, r.key, len(steps))
	t.Logf("commands per script: %v", got)
	for i, s := range steps {
		if got[i] > s.most {
			t.Errorf("%s ran %d commands, want at most %d", s.what, got[i], s.most)
		}
	}
}

// TestUnfairRecentRecord: an attempt marked as having a recent record
// ("k<n>") keeps the waiter's record when it is queued, and queues it with
// a record when it is not (its record was dropped meanwhile).
func TestUnfairRecentRecord(t *testing.T) {
	t.Parallel()
	r := newScriptRunner(t, map[string]string{"B": "LB"}, true)
	wk := name(kindWaiters, r.key)
	r.acquire("A", "0")
	r.acquire("B", "1")
	rec := r.c.HGet(r.ctx, wk, "B").Val()
	if r.acquire("B", "k2") >= 0 || r.c.HGet(r.ctx, wk, "B").Val() != rec {
		t.Fatalf("B's attempt with a recent record changed its record %q to %q", rec, r.c.HGet(r.ctx, wk, "B").Val())
	}
	r.c.ZRem(r.ctx, name(kindQueue, r.key), "B")
	r.c.HDel(r.ctx, wk, "B")
	if r.acquire("B", "k3") >= 0 {
		t.Fatal("B's attempt took the held key")
	}
	if f := strings.Fields(r.c.HGet(r.ctx, wk, "B").Val()); len(f) < 4 || f[1] != "3" || f[3] != "LB" {
		t.Errorf("B's record after an attempt out of the queue = %q; want seq 3 of Locker LB", f)
	}
	if !slices.Equal(r.queued(), []string{"B"}) {
		t.Errorf("queue = %v; want [B]", r.queued())
	}
}

// TestUnfairWaiterAttemptWritesNothing: the attempt an unfair waiting Lock
// makes when its subscription becomes active, right after the attempt that
// queued it, finds it queued with a recent record and writes nothing
// (MGET, ZSCORE, PTTL).
func TestUnfairWaiterAttemptWritesNothing(t *testing.T) {
	t.Parallel()
	addr, c, ctx, key := keyOnServer(t)
	a, b := newUnfairLocker(t, addr), newUnfairLocker(t, addr)
	// Loaded before MONITOR starts: a NOSCRIPT round would count too.
	for _, s := range []string{include(acquireLua), include(releaseLua)} {
		if err := c.ScriptLoad(ctx, s).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m := startMonitor(t, addr)
	if _, err := a.TryLock(ctx, key); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.Lock(wctx, key)
		done <- err
	}()
	for !waiting(t, ctx, a, key) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // B's subscription becomes active meanwhile
	cancel()
	if err := <-done; !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("B's Lock on the held key: %v; want ErrNotAcquired", err)
	}
	// A's TryLock, B's attempt that queues, B's attempt once subscribed;
	// the next script (B's leave, after the cancel) ends the last one.
	counts := m.scripts(ctx, t, key, 3)
	t.Logf("commands per script: %v", counts)
	if counts[2] > 4 {
		t.Errorf("the waiter's second attempt on the held key ran %d commands, want at most 4", counts[2])
	}
}

// newUnfairLocker returns an unfair Locker with a TTL of a minute on the
// server at addr, on a client of its own, closed when t ends.
func newUnfairLocker(t *testing.T, addr string) locker.Locker {
	t.Helper()
	l, err := Config{Unfair: true}.New(newClient(t, addr), locker.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestUnfairPollingAttempt: the attempt of a polling unfair waiter ("p<n>")
// on a held key records it as woken for pollWindow (the " woke" field),
// which spares it the wake-ups of the releases meanwhile (release.lua's
// wake_due), when it is the first in the queue; a polling waiter behind the
// first records nothing, and neither attempt rewrites its record.
func TestUnfairPollingAttempt(t *testing.T) {
	t.Parallel()
	r := newScriptRunner(t, map[string]string{"B": "LB", "C": "LC"}, true)
	wk := name(kindWaiters, r.key)
	if r.acquire("A", "0") <= 0 {
		t.Fatal("A could not take the free key")
	}
	if r.acquire("B", "1") >= 0 || r.acquire("C", "1") >= 0 {
		t.Fatal("B and C were not queued behind A")
	}
	recs := r.c.HGetAll(r.ctx, wk).Val()
	if r.acquire("C", "p2") >= 0 {
		t.Fatal("C's polling attempt took the held key")
	}
	if woke := r.c.HGet(r.ctx, wk, " woke").Val(); woke != "" {
		t.Errorf("C's polling attempt, second in the queue, recorded a wake-up: %q", woke)
	}
	before, err := r.c.Time(r.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if r.acquire("B", "p2") >= 0 {
		t.Fatal("B's polling attempt took the held key")
	}
	var until int64
	var who string
	if _, err := fmt.Sscanf(r.c.HGet(r.ctx, wk, " woke").Val(), "%d %s", &until, &who); err != nil || who != "B" || until < before.UnixMicro()+pollWindow.Microseconds() {
		t.Errorf("B's polling attempt recorded the wake-up (%d, %q, %v); want B's, %v past the server's time before it, %d",
			until, who, err, pollWindow, before.UnixMicro())
	}
	for _, w := range []string{"B", "C"} {
		if got := r.c.HGet(r.ctx, wk, w).Val(); got != recs[w] {
			t.Errorf("%s's polling attempt changed its record %q to %q", w, recs[w], got)
		}
	}
	if !slices.Equal(r.queued(), []string{"B", "C"}) {
		t.Errorf("queue = %v; want [B C]", r.queued())
	}
}
