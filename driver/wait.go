package driver

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Sleep waits for d or until ctx ends, and reports whether d passed: the
// one sleep of the engine's and the drivers' wait loops.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Jitter returns a random duration in [d/2, d], so that waiters started
// together do not retry together. It is the one jitter formula of the
// engine and the drivers.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Past returns a random duration a little longer than d: d plus
// Jitter(d/10 + 1ms). A waiter sleeps Past(d) to wake once a claim that
// runs d more has ended, without herding with the other waiters.
func Past(d time.Duration) time.Duration {
	return d + Jitter(d/10+time.Millisecond)
}

// Backoff is a Locker's polling policy (locker.WithBackoff): the pause
// after attempt number attempt (from 0), before jitter. It is a pure
// function of attempt.
type Backoff func(attempt int) time.Duration

// Delay returns how long a waiter sleeps after its attempt number attempt
// found the key held for remaining more (0 when unknown). A waiter that
// polls (notified false) sleeps the jittered backoff, or Past(remaining)
// when the claim ends sooner. A notified waiter wakes on the notification,
// so it sleeps Past(remaining), or the jittered backoff (at least 1s) when
// remaining is unknown: a crashed holder never announces its release.
func (b Backoff) Delay(attempt int, remaining time.Duration, notified bool) time.Duration {
	step := b(attempt)
	switch {
	case remaining > 0 && (notified || remaining < step):
		return Past(remaining)
	case notified:
		return Jitter(max(step, time.Second))
	}
	return Jitter(step)
}

// Subscribe starts watching the key a [Backoff.Poll] waits for, as
// [Notifier.Subscribe] does.
type Subscribe func(ctx context.Context) (ch <-chan struct{}, cancel func(), err error)

// Poll waits for a key by calling try until it returns anything but an
// error matching [ErrHeld], or ctx ends. It is the one poll loop of the
// engine and of the drivers that poll.
//
// Between attempts it sleeps [Backoff.Delay]. With subscribe it subscribes
// once an attempt found the key held, tries again at once (a release before
// the subscription is not missed), and from then on also wakes when the
// channel receives. A failed subscription leaves it polling. It cancels the
// subscription before it returns. The uncontended path is one call of try.
//
// On success the grant's Since is the send time of the winning attempt
// when try left it zero, and Queued is set when an earlier attempt found
// the key held. When ctx ends it returns ctx.Err().
func (b Backoff) Poll(ctx context.Context, try func(context.Context) (Grant, error), subscribe Subscribe) (Grant, error) {
	var notify <-chan struct{}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt, held := 0, false; ; held = true {
		sent := time.Now()
		g, err := try(ctx)
		if err == nil || !errors.Is(err, ErrHeld) {
			if err == nil && g.Since.IsZero() {
				g.Since = sent
			}
			g.Queued = g.Queued || held
			return g, err
		}
		if subscribe != nil {
			ch, cancel, serr := subscribe(ctx)
			subscribe = nil
			switch {
			case serr == nil:
				defer cancel()
				notify = ch
				continue // try again now that no release can be missed
			case ctx.Err() != nil:
				return Grant{}, ctx.Err()
			}
		}
		d := b.Delay(attempt, Remaining(err), notify != nil)
		attempt++
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-notify:
		case <-timer.C:
		case <-ctx.Done():
			return Grant{}, ctx.Err()
		}
	}
}
