package driver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

func TestFenceWindow(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{time.Millisecond, driver.MinFenceWindow},
		{2 * time.Second, 500 * time.Millisecond},
		{time.Hour, driver.MaxFenceWindow},
	} {
		if got := driver.FenceWindow(c.ttl); got != c.want {
			t.Errorf("FenceWindow(%v) = %v, want %v", c.ttl, got, c.want)
		}
	}
}

func TestStoreClockMapsReadings(t *testing.T) {
	var c driver.StoreClock
	now := time.Now()
	if got, want := c.At(now), now.UnixMicro(); got != want {
		t.Errorf("before any reading At = %d, want the local wall clock %d", got, want)
	}
	// A store clock an hour ahead, read with a 2 ms round trip.
	ahead := now.Add(time.Hour).UnixMicro()
	c.Observe(ahead, now.Add(-time.Millisecond), 2*time.Millisecond)
	if got := c.At(now.Add(time.Second)); got != ahead+time.Second.Microseconds() {
		t.Errorf("At 1s after the reading = %d, want %d", got, ahead+time.Second.Microseconds())
	}
	// A reading with a far longer round trip does not replace a recent one.
	c.Observe(0, now, time.Second)
	if got := c.At(now); got != ahead {
		t.Errorf("a slow reading replaced a fast one: At = %d, want %d", got, ahead)
	}
}

func TestStoreClockFenceEndsWithCtx(t *testing.T) {
	var c driver.StoreClock
	sent := time.Now()
	ctx, cancel := context.WithDeadline(t.Context(), sent.Add(10*time.Millisecond))
	defer cancel()
	if f := c.Fence(ctx, sent, time.Hour); !f.Local.Equal(sent.Add(10 * time.Millisecond)) {
		t.Errorf("Fence.Local = %v, want the ctx deadline %v", f.Local, sent.Add(10*time.Millisecond))
	}
	if f := c.Fence(t.Context(), sent, time.Hour); !f.Local.Equal(sent.Add(driver.MaxFenceWindow)) {
		t.Errorf("Fence.Local = %v, want %v after sent", f.Local.Sub(sent), driver.MaxFenceWindow)
	}
}

func TestAwaitFence(t *testing.T) {
	var c driver.StoreClock
	f := driver.Fence{Local: time.Now(), Store: 1000}
	behind := func(context.Context) (int64, error) { return 999, nil }
	past := func(context.Context) (int64, error) { return 1001, nil }
	broken := errors.New("broken")
	fails := func(context.Context) (int64, error) { return 0, broken }
	if err := c.AwaitFence(t.Context(), f, behind); err == nil {
		t.Error("AwaitFence returned nil while the store's clock is before the fence")
	}
	if err := c.AwaitFence(t.Context(), f, fails); !errors.Is(err, broken) {
		t.Errorf("AwaitFence = %v, want read's error", err)
	}
	if err := c.AwaitFence(t.Context(), f, past); err != nil {
		t.Errorf("AwaitFence = %v, want nil once the store's clock is past the fence", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	later := driver.Fence{Local: time.Now().Add(time.Hour), Store: 0}
	if err := c.AwaitFence(ctx, later, past); !errors.Is(err, context.Canceled) {
		t.Errorf("AwaitFence with an ended ctx = %v, want context.Canceled", err)
	}
}
