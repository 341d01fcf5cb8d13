package locker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// blackHole is tableDriver behind a black-holed network: once cut, every
// store call blocks until its ctx ends, as with a store that never answers.
type blackHole struct {
	*tableDriver
	cut      atomic.Bool
	releases chan struct{} // receives when a Release starts while cut
}

func newBlackHole() *blackHole {
	return &blackHole{tableDriver: newTableDriver(), releases: make(chan struct{}, 100)}
}

func (d *blackHole) wait(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (d *blackHole) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if d.cut.Load() {
		return driver.Grant{}, d.wait(ctx)
	}
	return d.tableDriver.TryAcquire(ctx, r)
}

func (d *blackHole) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	if d.cut.Load() {
		return nil, nil, d.wait(ctx)
	}
	return d.tableDriver.RenewBatch(ctx, ls)
}

func (d *blackHole) Release(ctx context.Context, l driver.Lease) error {
	if d.cut.Load() {
		d.releases <- struct{}{}
		return d.wait(ctx)
	}
	return d.tableDriver.Release(ctx, l)
}

// Close stands for a driver whose own closing work (an etcd lease revoke)
// waits for the store with a long timeout of its own; CloseContext gives up
// when the Locker's Close must return.
func (d *blackHole) Close() error {
	if d.cut.Load() {
		time.Sleep(10 * time.Second)
	}
	return nil
}

func (d *blackHole) CloseContext(ctx context.Context) error {
	if d.cut.Load() {
		<-ctx.Done() // gives up, leaving the rest to the store's expiry
	}
	return nil
}

// TestCloseEndsHoldsBeforeReleasing: with the store black-holed, Close
// closes every Done before its releases even start, cancels the store calls
// in flight (an Unlock and a TryLock with context.Background) and returns
// within its release timeout, not one per call, the driver's own closing
// work included.
func TestCloseEndsHoldsBeforeReleasing(t *testing.T) {
	const releaseTimeout = 300 * time.Millisecond
	d := newBlackHole()
	l, err := New(d, WithTTL(10*time.Second), WithReleaseTimeout(releaseTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var locks []Lock
	for _, k := range []string{"a", "b", "c"} {
		lk, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
	}
	d.cut.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- locks[2].Unlock(ctx) }()
	tried := make(chan error, 1)
	go func() { _, err := l.TryLock(ctx, "d"); tried <- err }()
	<-d.releases // the Unlock is in the store

	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	<-d.releases // Close's first release started: every Done is closed by now
	for _, lk := range locks[:2] {
		select {
		case <-lk.Done():
		default:
			t.Errorf("Done of %q still open when Close began releasing", lk.Key())
		}
		if !errors.Is(lk.Err(), ErrLost) || !errors.Is(lk.Err(), ErrClosed) {
			t.Errorf("Err of %q = %v; want ErrLost and ErrClosed", lk.Key(), lk.Err())
		}
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	took := time.Since(start)
	// A bound, not a measurement: one release timeout plus scheduling,
	// where the old Close took one per call in flight and per release.
	if took > releaseTimeout+2*time.Second {
		t.Errorf("Close took %v with a release timeout of %v", took, releaseTimeout)
	}
	if err := <-unlocked; err == nil {
		t.Errorf("an Unlock cut short by Close must not report success")
	}
	if err := <-tried; !errors.Is(err, ErrClosed) {
		t.Errorf("a TryLock cut short by Close = %v; want ErrClosed", err)
	}
	if err := locks[2].Err(); err != nil && !errors.Is(err, ErrLost) {
		t.Errorf("Err of the lock being unlocked = %v", err)
	}
	select {
	case <-locks[2].Done():
	default:
		t.Errorf("Done of the lock being unlocked still open after Close")
	}
}

// shortValidity is tableDriver granting and renewing locks for a quarter of
// their TTL, as a ZooKeeper session granted less than the TTL does.
type shortValidity struct{ *tableDriver }

func (d shortValidity) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := d.tableDriver.TryAcquire(ctx, r)
	g.Validity = r.TTL / 4
	return g, err
}

func (d shortValidity) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	v, errs, err := d.tableDriver.RenewBatch(ctx, ls)
	for i := range v {
		v[i] = ls[i].TTL / 4
	}
	return v, errs, err
}

// TestShortValidityIsRenewedInTime: a lock the store grants for less than
// the TTL is renewed within that validity (not only every TTL/3), and stays
// held. The validity, 2 s, is long enough for a loaded machine's late
// timers (CI lost a lock with a validity of 500 ms at load 24), and TTL/3
// (2.7 s) is still too late for it.
func TestShortValidityIsRenewedInTime(t *testing.T) {
	const ttl = 8 * time.Second
	l, err := New(shortValidity{newTableDriver()}, WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lk, err := l.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
		t.Fatalf("a lock granted for a quarter of its TTL was lost: %v", lk.Err())
	case <-time.After(ttl / 2): // lost at 2 s when renewed every TTL/3
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestPrefixMustLeaveRoomForAKey: New names the prefix length and the
// backend's limit.
func TestPrefixMustLeaveRoomForAKey(t *testing.T) {
	_, err := New(newTableDriver(), WithPrefix(strings.Repeat("p", 15)+"/"))
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "16 bytes") || !strings.Contains(err.Error(), "at most 16") {
		t.Fatalf("New with a 16-byte prefix and a 16-byte key limit = %v; want ErrInvalidOption naming both numbers", err)
	}
	l, err := New(newTableDriver(), WithPrefix(strings.Repeat("p", 14)+"/"))
	if err != nil {
		t.Fatalf("a 15-byte prefix leaves room for a 1-byte key: %v", err)
	}
	defer l.Close()
	lk, err := l.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	_ = lk.Unlock(context.Background())
}

// refusedRenewals is tableDriver whose renewals fail with cause, an error of
// unknown outcome (as a refused AUTH after a password rotation).
type refusedRenewals struct {
	*tableDriver
	cause error
}

func (d refusedRenewals) RenewBatch(_ context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	errs := make([]error, len(ls))
	for i := range errs {
		errs[i] = d.cause
	}
	return make([]time.Duration, len(ls)), errs, nil
}

// TestLossNamesTheLastRenewalError: a lock lost at its local deadline
// because its renewals failed says why they failed, and still matches
// ErrLost and ErrNoRenewal.
func TestLossNamesTheLastRenewalError(t *testing.T) {
	cause := errors.New("WRONGPASS invalid username-password pair")
	l, err := New(refusedRenewals{newTableDriver(), cause}, WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lk, err := l.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a lock whose renewals all failed was not lost")
	}
	if err := lk.Err(); !errors.Is(err, ErrLost) || !errors.Is(err, ErrNoRenewal) || !errors.Is(err, cause) {
		t.Errorf("Err() = %v; want ErrLost, ErrNoRenewal and the renewals' error", err)
	}
}
