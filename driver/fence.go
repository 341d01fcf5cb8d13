package driver

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// An acquiring request whose outcome is unknown (its ctx ended, its
// connection broke) may still reach the store much later: TCP delivers
// what was sent before a partition once it heals, and a pooler may queue
// it. A driver on a store with a clock it can compare in the request (a
// SQL database) therefore gives each acquiring request a [Fence], an
// instant of the store's clock after which the request changes nothing.
// The undo of such a request waits with [StoreClock.AwaitFence] until the
// store's clock has passed the fence, so that it runs after anything the
// request can still do, whatever connection either travels on.

const (
	// MinFenceWindow and MaxFenceWindow bound how long after it was sent
	// an acquiring request may still take a key (see [FenceWindow]).
	MinFenceWindow = 250 * time.Millisecond
	MaxFenceWindow = 2 * time.Second
)

// FenceWindow is how long after it was sent an acquiring request of a lock
// with this TTL may still take the key: a quarter of the TTL, within
// [MinFenceWindow] and [MaxFenceWindow].
func FenceWindow(ttl time.Duration) time.Duration {
	return min(max(ttl/4, MinFenceWindow), MaxFenceWindow)
}

// Fence is the instant after which an acquiring request changes nothing.
type Fence struct {
	// Local is the instant on the local monotonic clock.
	Local time.Time
	// Store is the instant on the store's clock, in µs since the epoch.
	Store int64
}

// StoreClock maps the local monotonic clock to a store's clock, from
// readings of the store's clock made by the driver's requests. The mapping
// never decides correctness: a wrong one makes a fence pass early (the
// request takes nothing) or late (an undo waits longer).
//
// The zero value is ready to use: before its first reading it takes the
// store's clock for the local wall clock. It is safe for concurrent use.
type StoreClock struct {
	mu    sync.Mutex
	store int64     // a reading: µs since the epoch on the store's clock
	local time.Time // the local instant of the reading (mid round trip)
	rtt   time.Duration
	set   bool
}

// Observe records a reading of the store's clock (µs since the epoch) by a
// request sent at sent and answered rtt later. A reading with a round trip
// more than twice the kept one's replaces it only when the kept one is a
// minute old.
func (c *StoreClock) Observe(store int64, sent time.Time, rtt time.Duration) {
	local := sent.Add(rtt / 2)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set && rtt > 2*c.rtt && local.Sub(c.local) < time.Minute {
		return
	}
	c.store, c.local, c.rtt, c.set = store, local, rtt, true
}

// At returns the store's clock at the local instant t, in µs since the
// epoch.
func (c *StoreClock) At(t time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set {
		return t.UnixMicro()
	}
	return c.store + t.Sub(c.local).Microseconds()
}

// Read calls read, which returns the store's clock in µs since the epoch,
// and records its answer. It returns read's error as it is.
func (c *StoreClock) Read(ctx context.Context, read func(context.Context) (int64, error)) (int64, error) {
	sent := time.Now()
	now, err := read(ctx)
	if err != nil {
		return 0, err
	}
	c.Observe(now, sent, time.Since(sent))
	return now, nil
}

// Fence returns the fence of an acquiring request sent at sent for a lock
// with this TTL: [FenceWindow] after sent, or ctx's deadline when sooner.
func (c *StoreClock) Fence(ctx context.Context, sent time.Time, ttl time.Duration) Fence {
	local := sent.Add(FenceWindow(ttl))
	if dl, ok := ctx.Deadline(); ok && dl.Before(local) {
		local = dl
	}
	return Fence{Local: local, Store: c.At(local)}
}

// AwaitFence returns nil once the store's clock, read by read, is past f:
// a request fenced by f can change nothing afterwards. It sleeps until f's
// local instant, then reads the store's clock once. It returns an error
// when ctx ends first, when read fails, or when the store's clock is not
// past f yet (try again later).
func (c *StoreClock) AwaitFence(ctx context.Context, f Fence, read func(context.Context) (int64, error)) error {
	if !Sleep(ctx, time.Until(f.Local)) {
		return ctx.Err()
	}
	now, err := c.Read(ctx, read)
	if err != nil {
		return err
	}
	if now < f.Store {
		return fmt.Errorf("the acquisition may still land for %v on the store's clock", time.Duration(f.Store-now)*time.Microsecond)
	}
	return nil
}
