package testenv

import (
	"context"
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
	s.Restart(t)
	if err := postgresPing(ctx, s.URL()); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
}
