package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/internal/storeenv"
)

// TestUnfairScriptCommands counts, through MONITOR, the commands of each
// script call of an unfair hand-off on one key: a release that wakes the
// first waiter reads its record, the wake-up field and the watch mark in
// one HMGET, and an attempt on a free key looks at the queue only to leave
// it (an attempt after the first of a waiting Lock).
func TestUnfairScriptCommands(t *testing.T) {
	t.Parallel()
	r := newScriptRunner(t, map[string]string{"B": "LB"}, true)
	// Loaded before MONITOR starts: a NOSCRIPT round would count too.
	for _, s := range []interface {
		Load(ctx context.Context, c goredis.Scripter) *goredis.StringCmd
	}{r.d.acquire, r.d.release} {
		if err := s.Load(r.ctx, r.c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m := startMonitor(t, storeenv.Redis(t).Addr())
	if r.acquire("A", "0") <= 0 {
		t.Fatal("A could not take the free key")
	}
	if r.acquire("B", "1") >= 0 {
		t.Fatal("B was not queued behind A")
	}
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
	if r.acquire("B", "2") <= 0 {
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
