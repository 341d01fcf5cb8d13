// Package otel_test checks lockerotel against the OpenTelemetry SDK: a
// scripted run's metrics, read with a manual reader, and its spans.
package otel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/leakcheck"
	"github.com/golocker/locker/lockerotel"
	"github.com/golocker/locker/memory"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestScriptedRun: 3 acquisitions, one of them contended (a hand-off), one
// lock lost by deleting its key behind the holder, the others released:
// the metrics and spans say exactly that.
func TestScriptedRun(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	obs, err := lockerotel.New(lockerotel.WithMeterProvider(mp), lockerotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}

	store := memory.NewStore()
	l, err := memory.New(store, locker.WithTTL(300*time.Millisecond), locker.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other, err := memory.New(store)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	a, err := l.TryLock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.TryLock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = held.Unlock(context.Background())
	}()
	b, err := l.Lock(ctx, "b") // contended: a hand-off
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.TryLock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	store.DeleteKey("c") // lost at its next renewal
	<-c.Done()
	_ = a.Unlock(ctx)
	_ = b.Unlock(ctx)
	// The loss is observed just after Done closes; once Close returns,
	// every event of the Locker's goroutines has been (see Observer).
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	var waits uint64
	var handoffs uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sums[m.Name] += p.Value
					if be, _ := p.Attributes.Value(attribute.Key("locker.backend")); be.AsString() != "memory" {
						t.Errorf("%s: backend attribute %q", m.Name, be.AsString())
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					waits += p.Count
					if h, ok := p.Attributes.Value(attribute.Key("locker.handoff")); ok && h.AsBool() {
						handoffs += p.Count
					}
				}
			}
		}
	}
	want := map[string]int64{"locker.lock.acquisitions": 3, "locker.lock.losses": 1, "locker.locks.held": 0}
	for name, n := range want {
		if sums[name] != n {
			t.Errorf("%s = %d, want %d (all: %v)", name, sums[name], n, sums)
		}
	}
	if waits != 3 || handoffs != 1 {
		t.Errorf("wait histogram: %d values, %d hand-offs; want 3 and 1", waits, handoffs)
	}

	var lockSpans, holdSpans, lostEvents int
	for _, s := range spans.GetSpans() {
		switch s.Name {
		case "locker.Lock", "locker.TryLock":
			lockSpans++
		case "locker.hold":
			holdSpans++
			for _, ev := range s.Events {
				if ev.Name == "locker.lost" {
					lostEvents++
				}
			}
			if tok, ok := attributeOf(s.Attributes, "locker.token"); !ok || tok.AsInt64() == 0 {
				t.Errorf("hold span without its token: %v", s.Attributes)
			}
		}
	}
	if lockSpans != 3 || holdSpans != 3 || lostEvents != 1 {
		t.Errorf("spans: %d lock waits, %d holds, %d loss events; want 3, 3, 1", lockSpans, holdSpans, lostEvents)
	}
}

func attributeOf(kvs []attribute.KeyValue, key string) (attribute.Value, bool) {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
