package locker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/rerun"
)

// TestSharedNeedsSharer checks that a semaphore or read-write lock on a
// backend whose driver is no driver.Sharer is refused at once, naming the
// backend.
func TestSharedNeedsSharer(t *testing.T) {
	l, err := New(newTableDriver())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, serr := NewSemaphore(l, "k", 2)
	_, rerr := NewRWMutex(l, "k")
	_, lerr := l.(SharedLocker).TryLockShared(t.Context(), "k", Share{Mode: Read})
	for _, err := range []error{serr, rerr, lerr} {
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "table backend has no shared holds") {
			t.Errorf("got %v, want ErrInvalidOption naming the table backend", err)
		}
	}
}

// TestCheckShare checks the validation of shared holds.
func TestCheckShare(t *testing.T) {
	for _, s := range []Share{
		{Mode: Permits, Limit: 0},
		{Mode: Permits, Limit: -1},
		{Mode: Permits, Limit: 2, Weight: 3},
		{Mode: Permits, Limit: 2, Weight: -1},
		{Mode: Read, Limit: 2},
		{Mode: Write, Weight: 2},
		{Mode: 9},
	} {
		if _, err := checkShare(s); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("checkShare(%+v) = %v, want ErrInvalidOption", s, err)
		}
	}
	if ds, err := checkShare(Share{Mode: Permits, Limit: 2}); err != nil || ds.Weight != 1 {
		t.Errorf("checkShare of one permit = %+v, %v; want weight 1", ds, err)
	}
}

// sharedTable is tableDriver with shared holds: permits granted without a
// limit, each its own holder.
type sharedTable struct {
	*tableDriver
	held  map[string]bool // key + " " + owner of every permit
	mixed atomic.Int64    // RenewBatch calls with locks and permits
}

func (d *sharedTable) TryAcquireShared(_ context.Context, r driver.Request, _ driver.Share) (driver.Grant, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	d.held[r.Key+" "+r.Owner] = true
	return driver.Grant{Token: d.seq}, nil
}

func (d *sharedTable) RenewBatch(_ context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	errs := make([]error, len(ls))
	var locks, permits int
	for i, l := range ls {
		switch {
		case d.held[l.Key+" "+l.Owner]:
			permits++
		case d.owners[l.Key] == l.Owner:
			locks++
		default:
			errs[i] = driver.ErrNotHeld
		}
	}
	if locks > 0 && permits > 0 {
		d.mixed.Add(1)
	}
	return make([]time.Duration, len(ls)), errs, nil
}

func (d *sharedTable) Release(ctx context.Context, l driver.Lease) error {
	d.mu.Lock()
	if k := l.Key + " " + l.Owner; d.held[k] {
		delete(d.held, k)
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	return d.tableDriver.Release(ctx, l)
}

// TestSharedRenewedWithLocks checks that permits are leases of the engine:
// renewed in the same RenewBatch calls as the Locker's locks, each by its
// own owner token, and released one by one.
func TestSharedRenewedWithLocks(t *testing.T) {
	const ttl = 300 * time.Millisecond
	// A round whose holds were lost while the process stalled runs again
	// (rerun.Stalled): a stall longer than the TTL loses them as the
	// contract allows. A renewal batch without the permits fails at once.
	rerun.Stalled(t, 3, ttl, func(int) error {
		d := &sharedTable{tableDriver: newTableDriver(), held: make(map[string]bool)}
		e := newTestEngine(t, d, WithTTL(ttl))
		ctx := t.Context()
		lk, err := e.TryLock(ctx, "lock")
		if err != nil {
			t.Fatal(err)
		}
		sem, err := NewSemaphore(e, "sem", 3)
		if err != nil {
			t.Fatal(err)
		}
		p1, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := sem.TryAcquireN(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		holds := []Lock{lk, p1, p2}
		for deadline := time.Now().Add(30 * time.Second); d.mixed.Load() < 3; time.Sleep(10 * time.Millisecond) {
			if err := firstErr(holds); err != nil {
				return fmt.Errorf("a renewed hold was lost after %d mixed batches: %w", d.mixed.Load(), err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("permits were not renewed with the locks: %d mixed batches in 30 s", d.mixed.Load())
			}
		}
		if err := firstErr(holds); err != nil {
			return fmt.Errorf("a renewed hold was lost: %w", err)
		}
		if p1.Token() == p2.Token() {
			t.Fatalf("two permits share token %d", p1.Token())
		}
		for _, l := range []Lock{p1, p2, lk} {
			if err := l.Unlock(ctx); err != nil {
				return fmt.Errorf("unlock of a renewed hold: %w", err)
			}
		}
		d.mu.Lock()
		left := len(d.held)
		d.mu.Unlock()
		if left != 0 {
			t.Fatalf("Unlock left %d permits in the store", left)
		}
		return nil
	})
}

// firstErr returns the Err of the first of holds that ended, or nil.
func firstErr(holds []Lock) error {
	for _, l := range holds {
		if err := l.Err(); err != nil {
			return err
		}
	}
	return nil
}
