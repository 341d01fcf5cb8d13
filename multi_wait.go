package locker

import (
	"context"
	"reflect"
	"time"

	"github.com/golocker/locker/driver"
)

// multiWait is the pause of a waiting LockMulti between its one-operation
// attempts. With a [driver.Notifier] it subscribes to every key once an
// attempt found one held, and wakes when any of them may be free, as a
// Lock's wait does for its key. Otherwise it sleeps the Locker's backoff.
type multiWait struct {
	e       *engine
	keys    []string // store keys
	tried   bool     // subscribed (or tried to), so the pauses are notified
	cases   []reflect.SelectCase
	cancels []func()
	timer   *time.Timer
}

// pause follows attempt number attempt, which failed with err (a key held):
// it reports whether to try again, false when ctx ended or until passed.
// The first pause of a Locker with a Notifier subscribes and returns at
// once, so that no release before the subscription is missed.
func (w *multiWait) pause(ctx context.Context, attempt int, err error, until time.Time) bool {
	if !w.tried && w.e.notifier != nil {
		w.tried = true
		for _, k := range w.keys {
			ch, cancel, serr := w.e.subscriber(k)(ctx)
			if serr != nil {
				if ctx.Err() != nil {
					return false
				}
				continue // the timer stands in for it
			}
			w.cancels = append(w.cancels, cancel)
			if ch != nil {
				w.cases = append(w.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
			}
		}
		if len(w.cases) > 0 {
			return true
		}
	}
	b := driver.Backoff(w.e.cfg.backoff)
	notified := len(w.cases) > 0
	d := b.Delay(attempt, driver.Remaining(err), notified)
	if notified {
		// A wake-up may be lost (the store's record of this waiter
		// expired, another waiter took it): poll now and then.
		d = min(d, b.Delay(attempt, 0, true))
	}
	last := false
	if left := time.Until(until); d >= left {
		d, last = max(left, 0), true
	}
	if !notified {
		return driver.Sleep(ctx, d) && !last
	}
	if w.timer == nil {
		w.timer = time.NewTimer(d)
		w.cases = append(w.cases,
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.timer.C)},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	} else {
		w.timer.Reset(d)
	}
	switch i, _, _ := reflect.Select(w.cases); i {
	case len(w.cases) - 1: // ctx
		return false
	case len(w.cases) - 2: // the timer
		return !last
	}
	return true
}

// close cancels the subscriptions and stops the timer.
func (w *multiWait) close() {
	for _, cancel := range w.cancels {
		cancel()
	}
	if w.timer != nil {
		w.timer.Stop()
	}
}
