package driver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

func constant(d time.Duration) driver.Backoff { return func(int) time.Duration { return d } }

func TestDelay(t *testing.T) {
	const step = 100 * time.Millisecond
	cases := []struct {
		name      string
		remaining time.Duration
		notified  bool
		lo, hi    time.Duration
	}{
		{"polling, holder's time unknown: the backoff", 0, false, step / 2, step},
		{"polling, holder's claim ends first: just past it", 10 * time.Millisecond, false, 10 * time.Millisecond, 12 * time.Millisecond},
		{"polling, claim longer than the backoff: the backoff", time.Minute, false, step / 2, step},
		{"notified, holder's time unknown: at least 1s", 0, true, time.Second / 2, time.Second},
		{"notified, claim known: just past it", time.Minute, true, time.Minute, time.Minute + 6*time.Second + time.Millisecond},
	}
	for _, c := range cases {
		for range 100 {
			if d := constant(step).Delay(3, c.remaining, c.notified); d < c.lo || d > c.hi {
				t.Fatalf("%s: Delay = %v, want within [%v, %v]", c.name, d, c.lo, c.hi)
			}
		}
	}
}

func TestPast(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 500 * time.Millisecond} {
		for range 100 {
			if p := driver.Past(d); p <= d || p > d+d/10+time.Millisecond {
				t.Fatalf("Past(%v) = %v, want in (%v, %v]", d, p, d, d+d/10+time.Millisecond)
			}
		}
	}
}

// attempts is a try function that finds the key held n times, then grants
// it.
type attempts struct {
	n, calls int
}

func (a *attempts) try(context.Context) (driver.Grant, error) {
	a.calls++
	if a.calls <= a.n {
		return driver.Grant{}, driver.Held(0)
	}
	return driver.Grant{Token: 7}, nil
}

// waitCtx bounds a test's Poll: a Poll that sleeps its backoff of an hour
// instead of trying at once ends with this ctx and fails the test.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestPollUncontended(t *testing.T) {
	a := &attempts{}
	subscribed := false
	sub := func(context.Context) (<-chan struct{}, func(), error) {
		subscribed = true
		return nil, func() {}, nil
	}
	before := time.Now()
	g, err := constant(time.Hour).Poll(waitCtx(t), a.try, sub)
	if err != nil || g.Token != 7 {
		t.Fatalf("Poll = %+v, %v; want the grant", g, err)
	}
	if a.calls != 1 || subscribed {
		t.Errorf("a free key took %d attempts (subscribed: %v); the uncontended path must be one attempt and no subscription", a.calls, subscribed)
	}
	if g.Queued || g.Since.Before(before) {
		t.Errorf("grant Queued = %v, Since = %v; want not queued, since the attempt was sent", g.Queued, g.Since)
	}
}

func TestPollTriesAgainOnceSubscribed(t *testing.T) {
	a := &attempts{n: 1}
	cancels := 0
	sub := func(context.Context) (<-chan struct{}, func(), error) {
		return make(chan struct{}), func() { cancels++ }, nil
	}
	g, err := constant(time.Hour).Poll(waitCtx(t), a.try, sub)
	if err != nil {
		t.Fatalf("Poll: %v; a release before the subscription must be caught by an attempt made at once after it", err)
	}
	if !g.Queued || a.calls != 2 || cancels != 1 {
		t.Errorf("Queued = %v, attempts = %d, cancels = %d; want queued, 2 attempts, the subscription cancelled once", g.Queued, a.calls, cancels)
	}
}

func TestPollWakesOnNotification(t *testing.T) {
	a := &attempts{n: 3}
	ch := make(chan struct{}, 1)
	sub := func(context.Context) (<-chan struct{}, func(), error) { return ch, func() {}, nil }
	try := func(ctx context.Context) (driver.Grant, error) {
		g, err := a.try(ctx)
		select {
		case ch <- struct{}{}: // the holder releases
		default:
		}
		return g, err
	}
	if _, err := constant(time.Hour).Poll(waitCtx(t), try, sub); err != nil {
		t.Fatalf("Poll: %v; a notification must end the sleep", err)
	}
}

func TestPollFallsBackToPolling(t *testing.T) {
	a := &attempts{n: 3}
	sub := func(context.Context) (<-chan struct{}, func(), error) { return nil, nil, errors.New("refused") }
	if _, err := constant(time.Millisecond).Poll(waitCtx(t), a.try, sub); err != nil {
		t.Fatalf("Poll: %v; a failed subscription must leave the wait polling", err)
	}
}

func TestPollEndsWithCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	a := &attempts{n: 1 << 30}
	try := func(ctx context.Context) (driver.Grant, error) {
		cancel()
		return a.try(ctx)
	}
	if _, err := constant(time.Hour).Poll(ctx, try, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Poll = %v; want ctx.Err() once ctx ends", err)
	}
}

func TestPollReturnsStoreErrors(t *testing.T) {
	boom := errors.New("boom")
	try := func(context.Context) (driver.Grant, error) { return driver.Grant{}, boom }
	if _, err := constant(time.Hour).Poll(waitCtx(t), try, nil); !errors.Is(err, boom) {
		t.Fatalf("Poll = %v; want the store's error, for the engine to decide", err)
	}
}
