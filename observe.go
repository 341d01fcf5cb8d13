package locker

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker/driver"
)

// EventKind says what an [Event] reports.
type EventKind int

// The kinds of events.
const (
	// EventAcquire: a Lock or TryLock ended, with the lock (Err nil, Token
	// set) or without it (Err says why: ErrNotAcquired, a ctx error, the
	// store's error). Wait is the time spent; Queued says that the key was
	// held by another when it was asked for (a hand-off, for a success).
	EventAcquire EventKind = iota + 1
	// EventRenewal: a renewal round of the Locker's watchdog ended. Count
	// locks were renewed in Wait; Failures of them failed (the store said
	// they are gone, or the outcome is unknown and will be retried).
	EventRenewal
	// EventLost: a held lock ended without its holder releasing it; Err is
	// the lock's Err (matching ErrLost and its cause), and Cause says why.
	EventLost
	// EventRelease: an Unlock ended: Err nil (released, or kept for its
	// MinHold), matching ErrNotHeld (it was no longer ours), or another error
	// (unknown outcome: released in the background). Wait is how long the
	// lock was held.
	EventRelease
	// EventBackgroundRelease: a release the Locker retried in the
	// background (after an unknown outcome, an ended ctx, a loss) ended:
	// Err nil once done, or the error of a try that will be retried.
	EventBackgroundRelease
)

// String returns the kind's name: "acquire", "renewal", …
func (k EventKind) String() string {
	switch k {
	case EventAcquire:
		return "acquire"
	case EventRenewal:
		return "renewal"
	case EventLost:
		return "lost"
	case EventRelease:
		return "release"
	case EventBackgroundRelease:
		return "background-release"
	}
	return "unknown"
}

// LossCause says why a lock was lost: see [EventLost].
type LossCause int

// The causes of a loss.
const (
	// LossNone: the event is not a loss.
	LossNone LossCause = iota
	// LossOther: none of the causes below (a store error ended the lock).
	LossOther
	// LossRenewalRefused: the store said the lock is no longer ours.
	LossRenewalRefused
	// LossDeadline: no renewal succeeded before the local deadline
	// ([ErrNoRenewal]).
	LossDeadline
	// LossMaxHold: the lock reached its MaxHold ([ErrMaxHold]).
	LossMaxHold
	// LossClosed: the Locker was closed while the lock was held
	// ([ErrClosed]).
	LossClosed
)

// String returns the cause's name: "renewal_refused", "deadline",
// "max_hold", "closed", "other"; "" for LossNone.
func (c LossCause) String() string {
	switch c {
	case LossOther:
		return "other"
	case LossRenewalRefused:
		return "renewal_refused"
	case LossDeadline:
		return "deadline"
	case LossMaxHold:
		return "max_hold"
	case LossClosed:
		return "closed"
	}
	return ""
}

// lossCause classifies the Err of a lost lock.
func lossCause(err error) LossCause {
	switch {
	case errors.Is(err, ErrMaxHold):
		return LossMaxHold
	case errors.Is(err, ErrClosed):
		return LossClosed
	case errors.Is(err, ErrNoRenewal):
		return LossDeadline
	case errors.Is(err, driver.ErrNotHeld):
		return LossRenewalRefused
	}
	return LossOther
}

// Event is something that happened to the locks of a Locker, reported to
// its [Observer]. Fields that do not apply to the kind are zero.
type Event struct {
	Kind EventKind
	// Ctx is the caller's context of the Lock, TryLock or Unlock (for
	// tracing); context.Background for events of the Locker's own
	// goroutines.
	Ctx     context.Context
	Backend string
	// Key is the caller's key, without the prefix ("" for a renewal).
	Key   string
	Token uint64
	// Start is when the operation began (the Lock call, the acquisition
	// for a release); Wait how long it lasted.
	Start time.Time
	Wait  time.Duration
	// Queued: see EventAcquire. Try: the acquisition was a TryLock.
	Queued, Try bool
	// Count and Failures: see EventRenewal.
	Count, Failures int
	Err             error
	// Cause: see EventLost; LossNone for the other kinds.
	Cause LossCause
}

// Observer receives a Locker's events (see [WithObserver]). Observe is
// called synchronously, on the goroutine of the operation, so it must be
// fast and must not block or call the Locker. An EventLost is observed just
// after the lock's Done closes (Done never waits for an observer); once the
// Locker's Close returns, every event of its goroutines has been observed.
type Observer interface {
	Observe(Event)
}

// ObserverFunc turns a function into an Observer.
type ObserverFunc func(Event)

// Observe implements Observer.
func (f ObserverFunc) Observe(e Event) { f(e) }

// MultiObserver returns an Observer that passes each event to every one of
// obs, in order, on the caller's goroutine. Nil observers are skipped.
func MultiObserver(obs ...Observer) Observer {
	all := make(multiObserver, 0, len(obs))
	for _, o := range obs {
		if o != nil {
			all = append(all, o)
		}
	}
	return all
}

type multiObserver []Observer

func (m multiObserver) Observe(e Event) {
	for _, o := range m {
		o.Observe(e)
	}
}

// WithObserver makes the Locker report its events to o: metrics, traces,
// audit logs (package lockerotel wires them to OpenTelemetry). A later
// WithObserver replaces an earlier one: combine several with
// [MultiObserver]. A Locker without an observer pays nothing for it.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if o == nil {
			return invalidOption("WithObserver", "nil Observer")
		}
		c.observer = o
		return nil
	}
}

// observe reports ev to the Locker's observer, filling in what every event
// has.
func (e *engine) observe(ev Event) {
	ev.Backend = e.name
	if ev.Ctx == nil {
		ev.Ctx = context.Background()
	}
	if ev.Kind == EventLost {
		ev.Cause = lossCause(ev.Err)
	}
	e.cfg.observer.Observe(ev)
}
