package conformance

import (
	"testing"
	"time"

	"github.com/golocker/locker"
)

// benchLockMulti measures an uncontended LockMulti and Unlock of three keys
// beside a Lock and Unlock of one, interleaved in the same loop: ns/op is
// the LockMulti's, and x-lock the ratio of the two means.
func benchLockMulti(b *testing.B, h Harness) {
	l := benchLocker(b, h)
	base := keyFrom(b.Name(), 40)
	single := base + ".1"
	keys := []string{base + ".a", base + ".b", base + ".c"}
	ctx := b.Context()
	var one, multi time.Duration
	n := 0
	for b.Loop() {
		start := time.Now()
		lk, err := l.Lock(ctx, single)
		if err != nil {
			b.Fatalf("Lock: %v", err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatalf("Unlock: %v", err)
		}
		mid := time.Now()
		m, err := locker.LockMulti(ctx, l, keys)
		if err != nil {
			b.Fatalf("LockMulti(%q): %v", keys, err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatalf("MultiLock.Unlock: %v", err)
		}
		one += mid.Sub(start)
		multi += time.Since(mid)
		n++
	}
	if n == 0 || one <= 0 {
		return
	}
	b.ReportMetric(float64(multi.Nanoseconds())/float64(n), "ns/op")
	b.ReportMetric(float64(one.Nanoseconds())/float64(n), "lock-ns/op")
	b.ReportMetric(float64(multi)/float64(one), "x-lock")
}
