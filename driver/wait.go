package driver

import (
	"context"
	"math/rand/v2"
	"time"
)

// Sleep waits for d or until ctx ends, and reports whether d passed: the
// one sleep of the engine's and the drivers' wait loops.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Jitter returns a random duration in [d/2, d], so that waiters started
// together do not retry together.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
