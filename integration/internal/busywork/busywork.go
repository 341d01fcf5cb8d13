// Package busywork keeps a client's or pool's connections busy with the
// caller's own slow work (conformance.Harness.Busy), for the integration
// harnesses of every backend whose Lockers share a pool with their caller.
package busywork

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fillWithin bounds how long Start waits for the work to hold every
// connection: opening connections to a loaded server takes a while.
const fillWithin = 10 * time.Second

// Start runs n copies of slow (a statement or blocking command on the
// caller's pool that lasts until its ctx ends; i, from 0 to n-1, tells the
// copies apart) at once, each again as soon as it fails, and waits until taken, the pool's connections in use,
// reaches n. It returns the function that ends the work and waits for its
// calls to return; it runs once, and at the latest when t ends. A pool
// that is still not full after fillWithin fails t.
func Start(t testing.TB, n int, taken func() int, slow func(ctx context.Context, i int) error) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				if slow(ctx, i) != nil {
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		})
	}
	release = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
	})
	t.Cleanup(release)
	deadline := time.Now().Add(fillWithin)
	for taken() < n {
		if time.Now().After(deadline) {
			t.Errorf("busywork: %d of the pool's %d connections in use after %v", taken(), n, fillWithin)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return release
}
