package otel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/golocker/locker"
	"github.com/golocker/locker/lockerotel"
	"github.com/golocker/locker/memory"
)

// TestWaitBucketsInSeconds: with the SDK's defaults, a wait of 50 ms and
// one of 2 s land in different buckets of locker.lock.wait.duration, whose
// unit is the second.
func TestWaitBucketsInSeconds(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	obs, err := lockerotel.New(lockerotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	store := memory.NewStore()
	l, err := memory.New(store, locker.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other, err := memory.New(store)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// Each Lock waits at least hold, for a holder that releases then.
	for _, hold := range []time.Duration{50 * time.Millisecond, 2 * time.Second} {
		held, err := other.TryLock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan struct{})
		go func() {
			defer close(released)
			time.Sleep(hold)
			_ = held.Unlock(context.Background())
		}()
		lk, err := l.Lock(ctx, "k")
		<-released
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var hist *metricdata.Histogram[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "locker.lock.wait.duration" {
				if m.Unit != "s" {
					t.Errorf("%s has unit %q, want s", m.Name, m.Unit)
				}
				hist = &h
			}
		}
	}
	if hist == nil || len(hist.DataPoints) != 1 {
		t.Fatalf("want one data point of locker.lock.wait.duration (two contended Locks), got %+v", hist)
	}
	p := hist.DataPoints[0]
	t.Logf("locker.lock.wait.duration (s), count %d, sum %.3f:\n%s", p.Count, p.Sum, bucketTable(p))
	var used []int
	for i, n := range p.BucketCounts {
		if n > 0 {
			used = append(used, i)
		}
	}
	if p.Count != 2 || len(used) != 2 {
		t.Errorf("a 50 ms and a 2 s wait must land in two different buckets: %d values in buckets %v of bounds %v", p.Count, used, p.Bounds)
	}
}

// bucketTable prints a histogram data point, one bucket a line.
func bucketTable(p metricdata.HistogramDataPoint[float64]) string {
	var b strings.Builder
	lo := "-inf"
	for i, n := range p.BucketCounts {
		hi := "+inf"
		if i < len(p.Bounds) {
			hi = fmt.Sprint(p.Bounds[i])
		}
		fmt.Fprintf(&b, "  (%s, %s]\t%d\n", lo, hi, n)
		lo = hi
	}
	return b.String()
}
