package locker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/rerun"
)

// keepingDriver is a tableDriver that can keep a key (Keep releases at
// once: these tests look at the engine's checks, not at the store's clock).
type keepingDriver struct{ *tableDriver }

func (d keepingDriver) Keep(ctx context.Context, l driver.Lease, _ time.Duration) error {
	return d.Release(ctx, l)
}

// TestExtendRefuses: Extend names what it refuses, and changes nothing.
func TestExtendRefuses(t *testing.T) {
	ctx := t.Context()
	keeps := newTestEngine(t, keepingDriver{newTableDriver()}, WithTTL(time.Second))
	plain := newTestEngine(t, newTableDriver(), WithTTL(time.Second))
	lk, err := keeps.TryLock(ctx, "k", MaxHold(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plain.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	before := lk.Deadline()
	for _, tc := range []struct {
		name string
		lk   Lock
		ctx  context.Context
		opts []LockOption
		want error
		text string
	}{
		{"nil ctx", lk, nil, []LockOption{MaxHold(time.Hour)}, ErrInvalidOption, "nil context"},
		{"TTL", lk, ctx, []LockOption{TTL(2 * time.Second)}, ErrInvalidOption, "TTL: a held lock's TTL cannot change"},
		{"bad MaxHold", lk, ctx, []LockOption{MaxHold(0)}, ErrInvalidOption, "MaxHold"},
		{"MaxHold below MinHold", lk, ctx, []LockOption{MaxHold(100 * time.Millisecond), MinHold(200 * time.Millisecond)}, ErrInvalidOption, "shorter than MinHold"},
		{"MinHold above the TTL", lk, ctx, []LockOption{MinHold(2 * time.Second)}, ErrInvalidOption, "longer than the TTL"},
		{"MinHold without Keeper", pl, ctx, []LockOption{MinHold(time.Millisecond)}, ErrInvalidOption, "cannot keep a key"},
		{"MinHold past MaxHold", lk, ctx, []LockOption{MaxHold(200 * time.Millisecond)}, nil, ""}, // lowers it, see below
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Extend(tc.ctx, tc.lk, tc.opts...)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Extend: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("Extend = %v; want an error matching %v that says %q", err, tc.want, tc.text)
			}
		})
	}
	if !lk.Deadline().Before(before) {
		t.Fatalf("Deadline %v did not follow the lowered MaxHold (was %v)", lk.Deadline(), before)
	}
	err = Extend(ctx, lk, MinHold(500*time.Millisecond))
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "MinHold: the MaxHold would end") {
		t.Errorf("Extend(MinHold) past the MaxHold = %v; want an error naming MinHold", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := Extend(ctx, lk, MaxHold(time.Hour)); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend after Unlock = %v; want ErrNotHeld", err)
	}
	if err := Extend(ctx, nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Extend(nil Lock) = %v; want ErrInvalidOption", err)
	}
	err = Do(ctx, plain, "nested", func(ctx context.Context) error {
		inner, err := plain.Lock(ctx, "nested")
		if err != nil {
			return err
		}
		if err := Extend(ctx, inner, MaxHold(time.Hour)); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("Extend of a nested hold = %v; want ErrUnsupported", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestExtendAsksTheStore: Extend of a lock the store no longer has fails
// with ErrNotHeld and ends the lock; with the store's answer unknown it
// fails and changes nothing.
func TestExtendAsksTheStore(t *testing.T) {
	ctx := t.Context()
	d := newTableDriver()
	e := newTestEngine(t, d, WithTTL(time.Second))
	lk, err := e.TryLock(ctx, "gone", MaxHold(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	d.hang.Store(true)
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	before := lk.Deadline()
	if err := Extend(sctx, lk, MaxHold(time.Millisecond*100)); err == nil {
		t.Fatal("Extend with a store that does not answer succeeded")
	}
	if lk.Deadline().Before(before) {
		t.Errorf("a failed Extend moved the Deadline from %v to %v", before, lk.Deadline())
	}
	d.hang.Store(false)
	d.mu.Lock()
	delete(d.owners, "gone")
	d.mu.Unlock()
	if err := Extend(ctx, lk, MaxHold(time.Hour)); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend of a lock the store dropped = %v; want ErrNotHeld", err)
	}
	select {
	case <-lk.Done():
	default:
		t.Error("the lock the store dropped is still open after Extend found it gone")
	}
	if !errors.Is(lk.Err(), ErrLost) {
		t.Errorf("Err = %v; want ErrLost", lk.Err())
	}
}

// ttlDriver records the TTL of the last renewal, for a backend with a TTL
// per lock.
type ttlDriver struct {
	keepingDriver
	mu   sync.Mutex
	last time.Duration
}

func (d *ttlDriver) Info() driver.Info {
	i := d.tableDriver.Info()
	i.PerLockTTL = true
	return i
}

func (d *ttlDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	d.mu.Lock()
	d.last = ls[len(ls)-1].TTL
	d.mu.Unlock()
	return d.tableDriver.RenewBatch(ctx, ls)
}

// TestExtendSendsTheMinHoldTTL: on a backend with a TTL per lock, Extend's
// renewal asks for the TTL that keeps the key for the new MinHold, and for
// the lock's own TTL once the MinHold is dropped.
func TestExtendSendsTheMinHoldTTL(t *testing.T) {
	ctx := t.Context()
	d := &ttlDriver{keepingDriver: keepingDriver{newTableDriver()}}
	e := newTestEngine(t, d, WithTTL(time.Second))
	lk, err := e.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := Extend(ctx, lk, MinHold(time.Minute)); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	got := d.last
	d.mu.Unlock()
	if got < time.Minute-time.Second || got > time.Minute+time.Second {
		t.Errorf("Extend(MinHold(1m)) renewed with TTL %v; want about a minute", got)
	}
	if err := Extend(ctx, lk, MinHold(0)); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	got = d.last
	d.mu.Unlock()
	if got != time.Second {
		t.Errorf("Extend(MinHold(0)) renewed with TTL %v; want the lock's TTL 1s", got)
	}
}

// TestExtendRacesRenewals: Extend calls from several goroutines, while
// the watchdog renews and the holder reads Deadline, Done and Err (run
// with -race), keep the lock held. The TTL is the shortest, for many
// renewal rounds to race with. The store answers at once, so a lock lost
// at its local deadline means that the watchdog starved: a round in which
// that happened while the process stalled runs again (rerun.Stalled), up
// to ten: at a 100 ms TTL a loaded CI machine stalls the process for as
// long in round after round; such a loss without a stall fails at once.
// See extendRacingRenewals.
func TestExtendRacesRenewals(t *testing.T) {
	e := newTestEngine(t, &ttlDriver{keepingDriver: keepingDriver{newTableDriver()}}, WithTTL(MinTTL))
	rerun.Stalled(t, 10, MinTTL, func(i int) error {
		return extendRacingRenewals(t, e, fmt.Sprintf("k%d", i))
	})
}

// extendRacingRenewals is one attempt of TestExtendRacesRenewals, on key.
// It reports a fault with t.Errorf. It returns the errors of a starved
// loss, nil when there was none: the lock lost at its local deadline ([ErrNoRenewal];
// then also the Extends that found it gone, in the engine or in the store
// it was released from). An Extend whose renewal outlived the lock's
// deadline as it stood when the Extend began renews again (see
// TestExtendOutlivesTheDeadlineItRead): its failure is a fault.
func extendRacingRenewals(t *testing.T, e *engine, key string) error {
	ctx := t.Context()
	lk, err := e.TryLock(ctx, key, MaxHold(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(5 * MinTTL)
	errs := make([]error, 4) // one per goroutine, then Unlock's
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				opts := []LockOption{MaxHold(time.Minute)}
				if i == 0 {
					opts = append(opts, MinHold(MinTTL/2))
				}
				if err := Extend(ctx, lk, opts...); err != nil {
					errs[i] = fmt.Errorf("Extend: %w", err)
					return
				}
				_, _ = lk.Deadline(), lk.Err()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if err := lk.Unlock(ctx); err != nil {
		errs[3] = fmt.Errorf("Unlock after the Extends: %w", err)
	}
	lost := errors.Is(lk.Err(), ErrNoRenewal)
	var stalls []error
	for _, err := range errs {
		switch {
		case err == nil:
		case lost && (errors.Is(err, ErrNoRenewal) || errors.Is(err, ErrNotHeld)):
			stalls = append(stalls, err)
		default:
			t.Error(err)
		}
	}
	if lost && len(stalls) == 0 {
		stalls = append(stalls, lk.Err())
	}
	return errors.Join(stalls...)
}
