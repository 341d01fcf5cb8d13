package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker"
)

// handoffWait is how long the waiter of the hand-off benchmark has been
// waiting in Lock when the holder unlocks. Backends that poll back off while
// they wait, so their hand-off time depends on it.
const handoffWait = 20 * time.Millisecond

// RunBenchmarks measures the backend h describes, each measurement as a
// sub-benchmark:
//
//   - LockUnlock: an uncontended Lock and Unlock (ns/op is one round trip
//     each way, at best).
//   - TryLockHeld: a TryLock refused because another Locker holds the key.
//   - Handoff: from the holder's Unlock to the return of the Lock another
//     Locker has been waiting in for 20 ms; reports handoff-p50-ms,
//     handoff-p90-ms and handoff-p99-ms, and ns/op as the mean hand-off.
//   - ParallelDistinctKeys: Lock and Unlock from b.RunParallel goroutines of
//     one Locker, each on its own key.
//   - LockMulti: an uncontended LockMulti and Unlock of three keys,
//     interleaved with a Lock and Unlock of one; ns/op is the LockMulti's,
//     lock-ns/op the Lock's, and x-lock their ratio.
//
// Only NewLocker and TTL of h are used.
func RunBenchmarks(b *testing.B, h Harness) {
	b.Helper()
	if h.NewLocker == nil {
		b.Fatal("conformance: Harness.NewLocker is nil")
	}
	b.Run("LockUnlock", func(b *testing.B) { benchLockUnlock(b, h) })
	b.Run("TryLockHeld", func(b *testing.B) { benchTryLockHeld(b, h) })
	b.Run("Handoff", func(b *testing.B) { benchHandoff(b, h) })
	b.Run("ParallelDistinctKeys", func(b *testing.B) { benchParallel(b, h) })
	b.Run("LockMulti", func(b *testing.B) { benchLockMulti(b, h) })
}

// benchLocker returns a fresh Locker that is closed when the benchmark ends.
func benchLocker(b *testing.B, h Harness) locker.Locker {
	b.Helper()
	l := h.NewLocker(b)
	if l == nil {
		b.Fatal("Harness.NewLocker returned nil")
	}
	b.Cleanup(func() {
		if err := l.Close(); err != nil {
			b.Logf("Close: %v", err)
		}
	})
	return l
}

func benchLockUnlock(b *testing.B, h Harness) {
	l := benchLocker(b, h)
	key := keyFrom(b.Name(), 48)
	ctx := b.Context()
	for b.Loop() {
		lk, err := l.Lock(ctx, key)
		if err != nil {
			b.Fatalf("Lock: %v", err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatalf("Unlock: %v", err)
		}
	}
}

func benchTryLockHeld(b *testing.B, h Harness) {
	holder, l := benchLocker(b, h), benchLocker(b, h)
	key := keyFrom(b.Name(), 48)
	ctx := b.Context()
	lk, err := holder.TryLock(ctx, key)
	if err != nil {
		b.Fatalf("TryLock on a free key: %v", err)
	}
	defer func() { _ = lk.Unlock(context.WithoutCancel(ctx)) }()
	for b.Loop() {
		if _, err := l.TryLock(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
			b.Fatalf("TryLock on a held key: got %v, want ErrNotAcquired", err)
		}
	}
}

func benchHandoff(b *testing.B, h Harness) {
	holder, waiter := benchLocker(b, h), benchLocker(b, h)
	key := keyFrom(b.Name(), 48)
	ctx := b.Context()
	type got struct {
		at  time.Time
		err error
	}
	// The timer runs throughout, so that b.N is sized by the real cost of an
	// iteration (handoffWait included); ns/op is then replaced by the mean
	// hand-off.
	lats := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		lk, err := holder.Lock(ctx, key)
		if err != nil {
			b.Fatalf("Lock: %v", err)
		}
		res := make(chan got, 1)
		go func() {
			wl, err := waiter.Lock(ctx, key)
			res <- got{time.Now(), err}
			if err == nil {
				// The holder's next Lock waits for this.
				_ = wl.Unlock(ctx)
			}
		}()
		time.Sleep(handoffWait)
		start := time.Now()
		if err := lk.Unlock(ctx); err != nil {
			b.Fatalf("Unlock: %v", err)
		}
		r := <-res
		if r.err != nil {
			b.Fatalf("the waiting Lock: %v", r.err)
		}
		lats = append(lats, r.at.Sub(start))
	}
	if len(lats) == 0 {
		return
	}
	slices.Sort(lats)
	var sum time.Duration
	for _, d := range lats {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	pct := func(p float64) time.Duration { return lats[int(p*float64(len(lats)-1))] }
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(lats)), "ns/op")
	b.ReportMetric(ms(pct(0.50)), "handoff-p50-ms")
	b.ReportMetric(ms(pct(0.90)), "handoff-p90-ms")
	b.ReportMetric(ms(pct(0.99)), "handoff-p99-ms")
}

func benchParallel(b *testing.B, h Harness) {
	l := benchLocker(b, h)
	base := keyFrom(b.Name(), 40)
	ctx := b.Context()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("%s-%d", base, n.Add(1))
		for pb.Next() {
			lk, err := l.Lock(ctx, key)
			if err != nil {
				b.Errorf("Lock: %v", err)
				return
			}
			if err := lk.Unlock(ctx); err != nil {
				b.Errorf("Unlock: %v", err)
				return
			}
		}
	})
}
