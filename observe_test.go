package locker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/memory"
)

// recorder is an Observer that keeps the events.
type recorder struct {
	mu     sync.Mutex
	events []locker.Event
}

func (r *recorder) Observe(e locker.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) of(kind locker.EventKind) []locker.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []locker.Event
	for _, e := range r.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// TestObserver: a scripted run (3 acquisitions, one of them after waiting
// for the key, a TryLock refused, a loss by deleting the key behind its
// holder) reports exactly those events, with their backend, keys, tokens
// and outcomes, and renewal rounds.
func TestObserver(t *testing.T) {
	const ttl = 300 * time.Millisecond
	// A round in which a lock was lost while the process stalled runs
	// again (rerun.Stalled): a stall longer than the TTL loses "a" before
	// its Unlock. Events that differ without a stall fail at once.
	rerun.Stalled(t, 3, ttl, func(int) error {
		store := memory.NewStore()
		rec := &recorder{}
		l, err := memory.New(store, locker.WithTTL(ttl), locker.WithObserver(rec))
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

		a, err := l.TryLock(ctx, "a") // 1: first try
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond) // a renewal round or two
		if err := a.Unlock(ctx); err != nil {
			return fmt.Errorf("unlock of a renewed lock: %w", err)
		}
		held, err := other.TryLock(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryLock(ctx, "b"); !errors.Is(err, locker.ErrNotAcquired) { // refused
			t.Fatalf("TryLock on a held key: %v", err)
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			_ = held.Unlock(context.Background())
		}()
		b, err := l.Lock(ctx, "b") // 2: after waiting
		if err != nil {
			t.Fatal(err)
		}
		c, err := l.TryLock(ctx, "c") // 3, lost below
		if err != nil {
			t.Fatal(err)
		}
		store.DeleteKey("c")
		<-c.Done()
		_ = b.Unlock(ctx)
		// The loss is observed just after Done closes; once Close returns,
		// every event of the Locker's goroutines has been (see Observer).
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}

		acq := rec.of(locker.EventAcquire)
		if len(acq) != 4 {
			t.Fatalf("%d acquire events, want 4 (3 acquired, 1 refused): %+v", len(acq), acq)
		}
		for i, want := range []struct {
			key      string
			ok, try  bool
			queued   bool
			minWait  time.Duration
			notAcqrd bool
		}{
			{key: "a", ok: true, try: true},
			{key: "b", try: true, queued: true, notAcqrd: true},
			{key: "b", ok: true, queued: true, minWait: 40 * time.Millisecond},
			{key: "c", ok: true, try: true},
		} {
			e := acq[i]
			switch {
			case e.Key != want.key || e.Backend != "memory" || e.Try != want.try:
				t.Errorf("acquire %d: %+v, want key %q on memory, try %v", i, e, want.key, want.try)
			case want.ok && (e.Err != nil || e.Token == 0):
				t.Errorf("acquire %d: %+v, want a success with a token", i, e)
			case want.notAcqrd && !errors.Is(e.Err, locker.ErrNotAcquired):
				t.Errorf("acquire %d: %+v, want ErrNotAcquired", i, e)
			case want.ok && e.Queued != want.queued:
				t.Errorf("acquire %d: queued %v, want %v", i, e.Queued, want.queued)
			case e.Wait < want.minWait:
				t.Errorf("acquire %d: waited %v, want at least %v", i, e.Wait, want.minWait)
			}
		}
		if lost := rec.of(locker.EventLost); len(lost) != 1 || lost[0].Key != "c" || !errors.Is(lost[0].Err, locker.ErrLost) || lost[0].Token != c.Token() || lost[0].Cause != locker.LossRenewalRefused {
			return fmt.Errorf("lost events %+v, want one for c matching ErrLost with its token and cause renewal_refused", lost)
		}
		rel := rec.of(locker.EventRelease)
		if len(rel) != 2 || rel[0].Key != "a" || rel[0].Err != nil || rel[0].Wait < 200*time.Millisecond || rel[1].Key != "b" {
			t.Errorf("release events %+v, want a (held 250 ms) then b", rel)
		}
		if rounds := rec.of(locker.EventRenewal); len(rounds) == 0 || rounds[0].Count < 1 {
			t.Errorf("renewal events %+v, want at least one round renewing a", rounds)
		}
		return nil
	})
}

func TestWithObserverRefusesNil(t *testing.T) {
	if _, err := memory.New(memory.NewStore(), locker.WithObserver(nil)); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("WithObserver(nil): %v", err)
	}
}

// TestLossCause: a lost lock's event names why it was lost; other events
// carry no cause.
func TestLossCause(t *testing.T) {
	rec := &recorder{}
	l, err := memory.New(memory.NewStore(), locker.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	short, err := l.TryLock(ctx, "max", locker.MaxHold(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-short.Done():
	case <-ctx.Done():
		t.Fatal("a lock past its MaxHold was not lost")
	}
	if _, err := l.TryLock(ctx, "open"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	causes := map[string]locker.LossCause{}
	for _, e := range rec.of(locker.EventLost) {
		causes[e.Key] = e.Cause
	}
	if causes["max"] != locker.LossMaxHold || causes["open"] != locker.LossClosed {
		t.Errorf("loss causes %v, want max: max_hold and open: closed", causes)
	}
	for _, e := range rec.of(locker.EventAcquire) {
		if e.Cause != locker.LossNone {
			t.Errorf("an acquire event carries the loss cause %v", e.Cause)
		}
	}
	if got := locker.LossMaxHold.String(); got != "max_hold" {
		t.Errorf("LossMaxHold.String() = %q, want max_hold", got)
	}
}

// TestMultiObserver: every observer given to MultiObserver sees every
// event, and nil ones are skipped.
func TestMultiObserver(t *testing.T) {
	a, b := &recorder{}, &recorder{}
	l, err := memory.New(memory.NewStore(), locker.WithObserver(locker.MultiObserver(a, nil, b)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lk, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*recorder{"first": a, "second": b} {
		if len(r.of(locker.EventAcquire)) != 1 || len(r.of(locker.EventRelease)) != 1 {
			t.Errorf("the %s observer saw %+v, want one acquire and one release", name, r.events)
		}
	}
}
