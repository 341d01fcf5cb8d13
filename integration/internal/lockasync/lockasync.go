// Package lockasync starts a Lock in the background, for the integration
// tests that make a waiter and act on the store while it waits.
package lockasync

import (
	"context"

	"github.com/golocker/locker"
)

// Result is what a background Lock returned.
type Result struct {
	Lock locker.Lock
	Err  error
}

// Lock calls l.Lock(ctx, key) in a goroutine; the channel, buffered,
// receives its result.
func Lock(ctx context.Context, l locker.Locker, key string) <-chan Result {
	ch := make(chan Result, 1)
	go func() {
		lk, err := l.Lock(ctx, key)
		ch <- Result{lk, err}
	}()
	return ch
}
