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
// copies apart), each again as soon as it fails. It starts them one at a
// time, each once taken, the pool's connections in use, exceeds the
// copies already started, so that each takes the connection meant for it
// (a go-redis pipeline that finds the pipeline pool dialling spills to the
// main pool). It returns once taken reaches n, with the function that ends
// the work and waits for its calls to return; it runs once, and at the
// latest when t ends. A pool that is still not full after fillWithin
// fails t.
func Start(t testing.TB, n int, taken func() int, slow func(ctx context.Context, i int) error) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	release = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
	})
	t.Cleanup(release)
	deadline := time.Now().Add(fillWithin)
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
		for taken() <= i {
			if time.Now().After(deadline) {
				t.Errorf("busywork: %d of the pool's %d connections in use after %v", taken(), n, fillWithin)
				return release
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return release
}
