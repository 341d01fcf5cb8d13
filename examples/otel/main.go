// Command otel wires lockerotel to the OpenTelemetry SDK with a Prometheus
// exporter, takes a few locks on an in-memory store (one of them contended,
// one lost), and prints the locker metrics as Prometheus would scrape them.
//
//	go run ./examples/otel
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/golocker/locker"
	"github.com/golocker/locker/lockerotel"
	"github.com/golocker/locker/memory"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "otel:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	obs, err := lockerotel.New(lockerotel.WithMeterProvider(mp))
	if err != nil {
		return err
	}

	store := memory.NewStore()
	l, err := memory.New(store, locker.WithTTL(300*time.Millisecond), locker.WithObserver(obs))
	if err != nil {
		return err
	}
	defer l.Close()
	other, err := memory.New(store)
	if err != nil {
		return err
	}
	defer other.Close()
	ctx := context.Background()

	held, err := other.TryLock(ctx, "report")
	if err != nil {
		return err
	}
	time.AfterFunc(50*time.Millisecond, func() { _ = held.Unlock(ctx) })
	if err := locker.Do(ctx, l, "report", func(context.Context) error { return nil }); err != nil { // waits: a hand-off
		return err
	}
	if _, err := l.TryLock(ctx, "report"); err != nil {
		return err
	}
	lk, err := l.TryLock(ctx, "cleanup")
	if err != nil {
		return err
	}
	store.DeleteKey("cleanup") // lost at the next renewal
	<-lk.Done()
	// The loss is observed just after Done closes; once Close returns,
	// every event of the Locker's goroutines has been.
	if err := l.Close(); err != nil {
		return err
	}

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "locker_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return sc.Err()
}
