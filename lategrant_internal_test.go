package locker

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// lateGrants is tableDriver whose next grants report a request sent two
// TTLs ago, as when the request waited that long for a connection: the
// grant's validity ended before it came back. steal hands each of those
// keys to another owner right after the grant, as a store whose lock
// expired meanwhile may have; expire drops them, as a store whose lock
// expired and that no one took since.
type lateGrants struct {
	*tableDriver
	late   atomic.Int32 // grants still to report late
	steal  bool
	expire bool
	tries  atomic.Int32
}

func (d *lateGrants) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	d.tries.Add(1)
	g, err := d.tableDriver.TryAcquire(ctx, r)
	if err != nil || d.late.Add(-1) < 0 {
		return g, err
	}
	g.Since = time.Now().Add(-2 * r.TTL)
	if d.steal || d.expire {
		d.mu.Lock()
		if d.steal {
			d.owners[r.Key] = "someone else"
		} else {
			delete(d.owners, r.Key)
		}
		d.mu.Unlock()
	}
	return g, err
}

// TestLateGrantConfirmed: a grant that came back past its validity is
// renewed before Lock or TryLock returns it, so the caller gets a lock
// that is held, not one already lost; when the store no longer holds it
// for the caller, TryLock reports the key not acquired and a waiting Lock
// tries again. Before, both returned a lock whose Done was closed.
func TestLateGrantConfirmed(t *testing.T) {
	const ttl = 5 * time.Second
	for _, ctxKind := range []string{"Background", "cancellable"} {
		ctx := context.Background()
		if ctxKind == "cancellable" {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
		}
		t.Run(ctxKind+"/still held", func(t *testing.T) {
			d := &lateGrants{tableDriver: newTableDriver()}
			d.late.Store(1)
			e := newTestEngine(t, d, WithTTL(ttl))
			lk, err := e.TryLock(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-lk.Done():
				t.Fatalf("TryLock returned a lock already lost: %v", lk.Err())
			default:
			}
			if n := d.renewed.Load(); n != 1 {
				t.Errorf("the late grant was renewed %d times before TryLock returned; want 1", n)
			}
			if left := time.Until(lk.Deadline()); left < ttl/2 {
				t.Errorf("the lock's deadline is %v away; want the renewal's validity, about %v", left, ttl)
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
		t.Run(ctxKind+"/gone, TryLock", func(t *testing.T) {
			d := &lateGrants{tableDriver: newTableDriver(), steal: true}
			d.late.Store(1)
			e := newTestEngine(t, d, WithTTL(ttl))
			lk, err := e.TryLock(ctx, "k")
			if err == nil {
				t.Fatalf("TryLock returned a lock (Err %v) whose late grant the store no longer held; want ErrNotAcquired", lk.Err())
			}
			if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, errGrantedLate) {
				t.Fatalf("TryLock = %v; want ErrNotAcquired, saying the grant came back late", err)
			}
		})
		t.Run(ctxKind+"/gone, Lock", func(t *testing.T) {
			d := &lateGrants{tableDriver: newTableDriver(), steal: true}
			d.late.Store(1)
			e := newTestEngine(t, d, WithTTL(ttl))
			// The first attempt's grant is gone; the thief's entry is
			// freed so that the next attempt can take the key.
			go func() {
				for d.tries.Load() < 1 {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(10 * time.Millisecond)
				d.mu.Lock()
				if d.owners["k"] == "someone else" {
					delete(d.owners, "k")
				}
				d.mu.Unlock()
			}()
			lctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			lk, err := e.Lock(lctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-lk.Done():
				t.Fatalf("Lock returned a lock already lost: %v", lk.Err())
			default:
			}
			if n := d.tries.Load(); n < 2 {
				t.Errorf("Lock made %d attempts; want a second one after the late grant was gone", n)
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLateGrantsPaceALock: a waiting Lock whose grants all come back late
// and gone pauses between attempts, with the pause it takes after a store
// error. Before, it asked again at once: a store slower than the validity
// got attempts back to back. The key is free at every attempt, so no wait
// for a holder paces them; the test counts the pauses the engine asked its
// Backoff for, not time.
func TestLateGrantsPaceALock(t *testing.T) {
	d := &lateGrants{tableDriver: newTableDriver(), expire: true}
	d.late.Store(math.MaxInt32)
	var pauses atomic.Int32
	backoff := func(int) time.Duration {
		pauses.Add(1)
		return 20 * time.Millisecond
	}
	e := newTestEngine(t, d, WithTTL(5*time.Second), WithBackoff(backoff))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		lk, err := e.Lock(ctx, "k")
		if err == nil {
			lk.Unlock(context.Background())
		}
		done <- err
	}()
	// Let it make a few attempts: each is a pause more on the new code,
	// and hundreds on the old one.
	for d.tries.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	err := <-done
	// The last attempt may fail after the ctx ended, without a pause.
	if n, p := d.tries.Load(), pauses.Load(); n > p+1 {
		t.Errorf("Lock made %d attempts with %d pauses between them; want a pause after each failed attempt", n, p)
	}
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, errGrantedLate) {
		t.Errorf("Lock = %v; want ErrNotAcquired, naming the late grants it rode out", err)
	}
}
