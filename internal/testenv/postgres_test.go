package testenv

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestPostgres starts a server and a PgBouncer in front of it, restarts the
// server, and checks that both answer.
func TestPostgres(t *testing.T) {
	s := NewPostgres(t)
	b := NewPgBouncer(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, u := range []string{s.URL(), b.URL()} {
		if err := postgresPing(ctx, u); err != nil {
			t.Fatalf("ping %s: %v", u, err)
		}
	}
	// The diagnostics of a failed test: the pooler's pools, and the
	// server's sessions (the pooler's among them).
	pools, err := b.Pools(ctx)
	if err != nil || !strings.Contains(pools, "database=locker_test") {
		t.Errorf("Pools: %v\n%s", err, pools)
	}
	act, err := s.Activity(ctx)
	if err != nil || !strings.Contains(act, "state=") {
		t.Errorf("Activity: %v\n%s", err, act)
	}
	s.Restart(t)
	if err := postgresPing(ctx, s.URL()); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
}
