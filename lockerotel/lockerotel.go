// Package lockerotel reports a Locker's events (locker.WithObserver) as
// OpenTelemetry metrics and spans:
//
//	obs, err := lockerotel.New() // the global MeterProvider and TracerProvider
//	l, err := redis.New(rdb, locker.WithObserver(obs))
//
// Metrics, each with the attribute locker.backend:
//
//   - locker.lock.wait.duration (histogram, s): how long Lock and TryLock
//     took, with locker.outcome (acquired, not_acquired, error) and
//     locker.handoff (the key was held by another when asked for). Its
//     bucket bounds are in seconds, from 1 ms to 60 s (see [WaitBuckets]);
//     an SDK View can replace them.
//   - locker.lock.acquisitions (counter): the same calls, by outcome.
//   - locker.lock.losses (counter): locks that ended without their holder
//     releasing them, with locker.cause (renewal_refused, deadline,
//     max_hold, closed, other).
//   - locker.lock.renewal.failures (counter): renewals that failed.
//   - locker.locks.held (up-down counter): locks held now.
//
// Keys are high-cardinality: WithKeyAttribute adds locker.key to every
// metric and span. Spans: "locker.Lock" / "locker.TryLock" for each wait,
// "locker.hold" for each held lock from acquisition to release (for Do and
// TryDo, their section), with locker.token, and the loss recorded as the
// event "locker.lost". Span parents come from the ctx of the calls.
//
// The package is a module of its own that depends on the OpenTelemetry API
// only: the application chooses the SDK and exporters.
package lockerotel

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/golocker/locker"
)

// scope names the instrumentation.
const scope = "github.com/golocker/locker/lockerotel"

// WaitBuckets returns the explicit bucket bounds, in seconds, of the
// histogram locker.lock.wait.duration: those OpenTelemetry's semantic
// conventions give HTTP durations, plus 1 ms and 2.5 ms below (one round
// trip) and 30 s and 60 s above (a wait behind holders).
func WaitBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60}
}

// Option configures New.
type Option func(*config)

type config struct {
	mp   metric.MeterProvider
	tp   trace.TracerProvider
	keys bool
}

// WithMeterProvider records metrics through mp instead of the global one.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider records spans through tp instead of the global one.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithKeyAttribute adds the lock's key (locker.key) to every metric and
// span: only for a bounded set of keys.
func WithKeyAttribute() Option { return func(c *config) { c.keys = true } }

// Observer is a locker.Observer that records OpenTelemetry metrics and
// spans. It is safe for concurrent use, by any number of Lockers.
type Observer struct {
	keys          bool
	tracer        trace.Tracer
	wait          metric.Float64Histogram
	acquisitions  metric.Int64Counter
	losses        metric.Int64Counter
	renewFailures metric.Int64Counter
	held          metric.Int64UpDownCounter
}

// New returns an Observer on the providers opts name (the global ones by
// default).
func New(opts ...Option) (*Observer, error) {
	c := config{}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	m := c.mp.Meter(scope)
	o := &Observer{keys: c.keys, tracer: c.tp.Tracer(scope)}
	var errs []error
	var err error
	o.wait, err = m.Float64Histogram("locker.lock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long Lock and TryLock took."),
		metric.WithExplicitBucketBoundaries(WaitBuckets()...))
	errs = append(errs, err)
	o.acquisitions, err = m.Int64Counter("locker.lock.acquisitions", metric.WithUnit("{call}"),
		metric.WithDescription("Lock and TryLock calls, by outcome."))
	errs = append(errs, err)
	o.losses, err = m.Int64Counter("locker.lock.losses", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks that ended without their holder releasing them."))
	errs = append(errs, err)
	o.renewFailures, err = m.Int64Counter("locker.lock.renewal.failures", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals that failed."))
	errs = append(errs, err)
	o.held, err = m.Int64UpDownCounter("locker.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held now."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("lockerotel: %w", err)
	}
	return o, nil
}

// Observe implements locker.Observer.
func (o *Observer) Observe(e locker.Event) {
	attrs := []attribute.KeyValue{attribute.String("locker.backend", e.Backend)}
	if o.keys && e.Key != "" {
		attrs = append(attrs, attribute.String("locker.key", e.Key))
	}
	ctx := e.Ctx
	switch e.Kind {
	case locker.EventAcquire:
		outcome := "acquired"
		switch {
		case errors.Is(e.Err, locker.ErrNotAcquired):
			outcome = "not_acquired"
		case e.Err != nil:
			outcome = "error"
		}
		with := append(attrs, attribute.String("locker.outcome", outcome), attribute.Bool("locker.handoff", e.Queued))
		o.wait.Record(ctx, e.Wait.Seconds(), metric.WithAttributes(with...))
		o.acquisitions.Add(ctx, 1, metric.WithAttributes(with...))
		if e.Err == nil {
			o.held.Add(ctx, 1, metric.WithAttributes(attrs...))
		}
		name := "locker.Lock"
		if e.Try {
			name = "locker.TryLock"
		}
		_, span := o.tracer.Start(ctx, name, trace.WithTimestamp(e.Start), trace.WithAttributes(with...))
		if e.Err == nil {
			span.SetAttributes(attribute.Int64("locker.token", int64(e.Token)))
		} else if outcome == "error" {
			span.SetStatus(codes.Error, e.Err.Error())
		}
		span.End(trace.WithTimestamp(e.Start.Add(e.Wait)))
	case locker.EventRelease:
		if !errors.Is(e.Err, locker.ErrNotHeld) { // a lost lock was counted out when lost
			o.held.Add(ctx, -1, metric.WithAttributes(attrs...))
		}
		o.holdSpan(e, attrs, "")
	case locker.EventLost:
		cause := e.Cause.String()
		o.losses.Add(ctx, 1, metric.WithAttributes(append(attrs, attribute.String("locker.cause", cause))...))
		o.held.Add(ctx, -1, metric.WithAttributes(attrs...))
		o.holdSpan(e, attrs, cause)
	case locker.EventRenewal:
		if e.Failures > 0 {
			o.renewFailures.Add(ctx, int64(e.Failures), metric.WithAttributes(attrs...))
		}
	}
}

// holdSpan records the span of a hold that ended with e (a release, or a
// loss with its cause).
func (o *Observer) holdSpan(e locker.Event, attrs []attribute.KeyValue, lostCause string) {
	if e.Start.IsZero() {
		return
	}
	_, span := o.tracer.Start(e.Ctx, "locker.hold", trace.WithTimestamp(e.Start),
		trace.WithAttributes(append(attrs, attribute.Int64("locker.token", int64(e.Token)))...))
	end := e.Start.Add(e.Wait)
	if lostCause != "" {
		span.AddEvent("locker.lost", trace.WithTimestamp(end), trace.WithAttributes(attribute.String("locker.cause", lostCause)))
		span.SetStatus(codes.Error, e.Err.Error())
	} else if e.Err != nil {
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

var _ locker.Observer = (*Observer)(nil)
