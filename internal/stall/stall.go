// Package stall records when the test process stalled: a timer of its own
// that fired later than its schedule by more than a margin, as a Locker's
// renewal would have. A test that failed while the process stalled says
// nothing of the Locker (docs/design.md, "Tests on a loaded machine"). The
// conformance suite and the tests of the core module use it; it imports
// only the standard library, and sits in the core module, so that the
// suite still pulls in no other module.
package stall

import (
	"sync"
	"time"
)

// Watch records the stalls of the process from Start to Stop. The zero
// Watch has no timer: it records only what Add gives it. A nil *Watch
// records nothing. Its methods are safe for concurrent use.
type Watch struct {
	mu     sync.Mutex
	stalls []span
	done   chan struct{}
	once   sync.Once
}

// span is one stall: from when the timer was due to when it fired.
type span struct{ from, to time.Time }

// Start returns a Watch whose timer fires every every and records a stall
// when it fires more than over late. Stop it with Stop.
func Start(every, over time.Duration) *Watch {
	w := &Watch{done: make(chan struct{})}
	go w.run(every, over)
	return w
}

// ForTTL returns a started Watch sized for Lockers of ttl. Its timer fires
// every twentieth of the TTL and counts a stall more than a twentieth
// late, within bounds. That is half the margin a Locker keeps before its
// local deadline, so a stall that could starve a renewal shows.
func ForTTL(ttl time.Duration) *Watch {
	return Start(clamp(ttl/20, 5*time.Millisecond, 100*time.Millisecond), clamp(ttl/20, 20*time.Millisecond, 250*time.Millisecond))
}

// clamp returns d within [lo, hi].
func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

// run is the timer's goroutine; it returns when Stop is called.
func (w *Watch) run(every, over time.Duration) {
	timer := time.NewTimer(every)
	defer timer.Stop()
	prev := time.Now()
	for {
		select {
		case <-w.done:
			return
		case <-timer.C:
		}
		now := time.Now()
		if now.Sub(prev)-every > over {
			w.Add(prev.Add(every), now)
		}
		prev = now
		timer.Reset(every)
	}
}

// Add records a stall from from to to, as the timer does when it fires
// late. Tests of the Watch's users feign stalls with it.
func (w *Watch) Add(from, to time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stalls = append(w.stalls, span{from, to})
}

// Stop ends the Watch's timer, if it has one; it may be called more than
// once. What it recorded stays.
func (w *Watch) Stop() {
	w.once.Do(func() {
		if w.done != nil {
			close(w.done)
		}
	})
}

// Longest returns the longest stall that overlapped the time from from to
// to, or 0; a nil Watch measures none.
func (w *Watch) Longest(from, to time.Time) time.Duration {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, s := range w.stalls {
		if s.from.Before(to) && s.to.After(from) {
			d = max(d, s.to.Sub(s.from))
		}
	}
	return d
}
