package locker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// multiDriver is a tableDriver that takes several keys at once, or answers
// as mode says: "notAtomic" (driver.ErrNotAtomic), "short" (takes every key
// but reports one grant too few).
type multiDriver struct {
	*tableDriver
	mode  string
	multi atomic.Int64 // TryAcquireMulti calls
	tries atomic.Int64 // TryAcquire calls
}

func (d *multiDriver) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	d.tries.Add(1)
	return d.tableDriver.TryAcquire(ctx, r)
}

func (d *multiDriver) TryAcquireMulti(_ context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	d.multi.Add(1)
	if d.mode == "notAtomic" {
		return nil, fmt.Errorf("%w: test", driver.ErrNotAtomic)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range reqs {
		if _, ok := d.owners[r.Key]; ok {
			return nil, driver.Held(0)
		}
	}
	gs := make([]driver.Grant, len(reqs))
	for i, r := range reqs {
		d.seq++
		d.owners[r.Key] = r.Owner
		gs[i] = driver.Grant{Token: d.seq}
	}
	if d.mode == "short" {
		gs = gs[1:]
	}
	return gs, nil
}

func (d *multiDriver) held() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.owners)
}

// TestMultiAtomicPath checks that TryLockMulti and an uncontended LockMulti
// take their keys with one TryAcquireMulti, each key an ordinary hold
// with its own token, renewed and released as one.
func TestMultiAtomicPath(t *testing.T) {
	d := &multiDriver{tableDriver: newTableDriver()}
	e := newTestEngine(t, d, WithTTL(time.Second))
	ctx := t.Context()
	keys := []string{"c", "a", "b"}
	for _, wait := range []bool{false, true} {
		m, err := lockMulti(ctx, "test", e, keys, wait, nil)
		if err != nil {
			t.Fatalf("wait %v: %v", wait, err)
		}
		if n, m := d.multi.Swap(0), d.tries.Swap(0); n != 1 || m != 0 {
			t.Errorf("wait %v: %d TryAcquireMulti and %d TryAcquire calls; want 1 and 0", wait, n, m)
		}
		seen := map[uint64]bool{}
		for _, k := range keys {
			tok := m.Token(k)
			if tok == 0 || seen[tok] {
				t.Errorf("wait %v: key %s has token %d; want a token of its own", wait, k, tok)
			}
			seen[tok] = true
		}
		before := d.renewed.Load()
		deadline := time.Now().Add(10 * time.Second)
		for d.renewed.Load() < before+3 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if d.renewed.Load() < before+3 {
			t.Errorf("wait %v: the keys were not renewed", wait)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Errorf("wait %v: Unlock: %v", wait, err)
		}
		if n := d.held(); n != 0 {
			t.Errorf("wait %v: %d keys held after Unlock", wait, n)
		}
	}
}

// TestTryLockMultiHeldTakesNothing checks that a TryLockMulti refused by
// the driver returns ErrNotAcquired and holds no key.
func TestTryLockMultiHeldTakesNothing(t *testing.T) {
	d := &multiDriver{tableDriver: newTableDriver()}
	e := newTestEngine(t, d, WithTTL(time.Second))
	ctx := t.Context()
	lk, err := e.TryLock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TryLockMulti(ctx, e, []string{"a", "b"}); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("TryLockMulti with b held: got %v, want ErrNotAcquired", err)
	}
	if n := d.held(); n != 1 {
		t.Errorf("%d keys held; want 1 (b)", n)
	}
	_ = lk.Unlock(ctx)
}

// TestLockMultiNotAtomicFallsBack checks that keys the driver cannot take
// in one operation are taken one by one.
func TestLockMultiNotAtomicFallsBack(t *testing.T) {
	d := &multiDriver{tableDriver: newTableDriver(), mode: "notAtomic"}
	e := newTestEngine(t, d, WithTTL(time.Second))
	ctx := t.Context()
	m, err := LockMulti(ctx, e, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if n, m := d.multi.Load(), d.tries.Load(); n != 1 || m != 3 {
		t.Errorf("%d TryAcquireMulti and %d TryAcquire calls; want 1 and 3", n, m)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// TestTryLockMultiBadGrantCount checks that a driver reporting fewer grants
// than keys fails the call, and that what it took is released.
func TestTryLockMultiBadGrantCount(t *testing.T) {
	d := &multiDriver{tableDriver: newTableDriver(), mode: "short"}
	e := newTestEngine(t, d, WithTTL(time.Second))
	if _, err := TryLockMulti(t.Context(), e, []string{"a", "b", "c"}); err == nil {
		t.Fatal("TryLockMulti succeeded with one grant missing")
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.held() > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// The key without a grant has no lease to release: it stays until
	// the store expires it. The two granted ones are released.
	if n := d.held(); n > 1 {
		t.Errorf("%d keys still held; want the granted ones released", n)
	}
}

// TestDoMultiNestedFallsBack checks that DoMulti inside a Do holding one
// of its keys nests that key instead of taking it again.
func TestDoMultiNestedFallsBack(t *testing.T) {
	d := &multiDriver{tableDriver: newTableDriver()}
	e := newTestEngine(t, d, WithTTL(time.Second))
	err := Do(t.Context(), e, "b", func(ctx context.Context) error {
		return DoMulti(ctx, e, []string{"a", "b"}, func(context.Context) error { return nil })
	})
	if err != nil {
		t.Fatalf("DoMulti inside Do on b: %v", err)
	}
	if n := d.multi.Load(); n != 0 {
		t.Errorf("%d TryAcquireMulti calls; want none (b is held up the call chain)", n)
	}
}

// TestSetOwners: the owners setOwners gives a set's requests are as
// rand.Text's (26 base32 letters) and distinct, in requests and across
// calls, though carved from one string.
func TestSetOwners(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		reqs := make([]driver.Request, 3)
		setOwners(reqs)
		for _, r := range reqs {
			if len(r.Owner) != len(rand.Text()) || strings.Trim(r.Owner, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != "" {
				t.Fatalf("owner %q is not 26 base32 letters, as rand.Text's", r.Owner)
			}
			if seen[r.Owner] {
				t.Fatalf("owner %q given twice: a request's owner must be its own", r.Owner)
			}
			seen[r.Owner] = true
		}
	}
}
