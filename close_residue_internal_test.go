package locker

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// queueingSharer is a Sharer whose every attempt is refused and recorded in
// line, with a Residue that withdraws the record. Once cut, a withdrawal
// blocks until its ctx ends, as with a store that never answers; with hang
// set, so does an attempt, whose outcome is then unknown.
type queueingSharer struct {
	*tableDriver
	cut      atomic.Bool
	hang     atomic.Bool
	refused  chan struct{} // receives after each refusal
	inFlight chan struct{} // receives when an attempt starts to hang
	withdraw atomic.Int64  // withdrawals tried while cut
	withdrew chan struct{} // receives after a withdrawal while not cut
}

func newQueueingSharer() *queueingSharer {
	return &queueingSharer{tableDriver: newTableDriver(), refused: make(chan struct{}, 100), inFlight: make(chan struct{}, 100), withdrew: make(chan struct{}, 100)}
}

func (d *queueingSharer) TryAcquireShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
	cleanup := func(ctx context.Context) error {
		if !d.cut.Load() {
			d.withdrew <- struct{}{}
			return nil
		}
		d.withdraw.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	if d.hang.Load() {
		d.inFlight <- struct{}{}
		<-ctx.Done()
		return driver.Grant{}, &driver.Residue{Err: ctx.Err(), Cleanup: cleanup}
	}
	d.refused <- struct{}{}
	return driver.Grant{}, &driver.Residue{Err: driver.Held(req.TTL / 3), Cleanup: cleanup}
}

// waitShared starts an Acquire on a semaphore of l and returns its result.
func waitShared(t *testing.T, l Locker) <-chan error {
	t.Helper()
	s, err := NewSemaphore(l, "s", 1)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { _, err := s.Acquire(context.Background()); res <- err }()
	return res
}

// TestCloseSkipsExpiredWaiterRecords: a Locker cut off from its store
// while a semaphore wait sleeps between answered refusals needs not wait
// its release timeout in Close: the store drops the wait's record a TTL
// after the last refusal (driver.Sharer), so Close tries its withdrawal
// only until then.
func TestCloseSkipsExpiredWaiterRecords(t *testing.T) {
	const ttl = time.Second
	const releaseTimeout = time.Minute
	d := newQueueingSharer()
	l, err := New(d, WithTTL(ttl), WithReleaseTimeout(releaseTimeout))
	if err != nil {
		t.Fatal(err)
	}
	res := waitShared(t, l)
	await(t, d.refused, "the semaphore wait's first attempt was not refused") // recorded in line
	d.cut.Store(true)
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	// A bound, not a measurement: the record is gone a TTL after the last
	// refusal; the old Close tried its withdrawal for the release timeout.
	bound := 2*ttl + 5*time.Second
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(bound):
		t.Fatalf("Close of a Locker cut off while a wait slept between answered refusals still running after %v (release timeout %v): it must not try to withdraw a record past the time the store drops it", bound, releaseTimeout)
	}
	t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	if err := await(t, res, "the wait did not return after Close returned"); !errors.Is(err, ErrClosed) {
		t.Errorf("the wait ended by Close = %v; want ErrClosed", err)
	}
}

// TestCloseWithdrawsAfterUnansweredAttempt: when the wait's last attempt
// went unanswered (it may still reach the store and renew the record at
// any time), Close still tries the withdrawal, within its release timeout.
func TestCloseWithdrawsAfterUnansweredAttempt(t *testing.T) {
	const releaseTimeout = 300 * time.Millisecond
	d := newQueueingSharer()
	l, err := New(d, WithTTL(time.Second), WithReleaseTimeout(releaseTimeout))
	if err != nil {
		t.Fatal(err)
	}
	d.hang.Store(true)
	res := waitShared(t, l)
	await(t, d.inFlight, "the semaphore wait's first attempt did not reach the store")
	d.cut.Store(true)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	if err := await(t, closed, "Close did not return"); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := await(t, res, "the wait did not return after Close returned"); !errors.Is(err, ErrClosed) {
		t.Errorf("the wait ended by Close = %v; want ErrClosed", err)
	}
	if d.withdraw.Load() == 0 {
		t.Errorf("Close did not try to withdraw the record of a wait whose last attempt went unanswered")
	}
}

// TestOpenLockerWithdrawsPastRecordExpiry: while the Locker is open, a
// withdrawal that failed is retried after the record's TTL has passed, until
// the store answers: a session the Locker keeps alive (etcd, ZooKeeper) may
// hold the record that long.
func TestOpenLockerWithdrawsPastRecordExpiry(t *testing.T) {
	const ttl = time.Second
	d := newQueueingSharer()
	l, err := New(d, WithTTL(ttl), WithReleaseTimeout(300*time.Millisecond), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := NewSemaphore(l, "s", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { _, err := s.Acquire(ctx); res <- err }()
	await(t, d.refused, "the semaphore wait's first attempt was not refused")
	d.cut.Store(true)
	answered := time.Now()
	cancel()
	if err := await(t, res, "the wait did not return when its ctx was cancelled"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("the cancelled wait = %v; want ErrNotAcquired", err)
	}
	time.Sleep(time.Until(answered.Add(ttl + ttl/2))) // past the record's TTL
	d.cut.Store(false)
	select {
	case <-d.withdrew:
	case <-time.After(10 * time.Second):
		t.Fatalf("an open Locker gave up withdrawing a record once its TTL had passed; a session it keeps alive may still hold it")
	}
}

// goneResidueDriver fails every TryAcquire with a Residue whose cleanup
// blocks until its ctx ends, as with a store that never answers, and whose
// record the store drops by itself at once (Gone).
type goneResidueDriver struct {
	*tableDriver
	tried atomic.Int64 // cleanups tried
}

func (d *goneResidueDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return driver.Grant{}, &driver.Residue{Err: errors.New("cut off"), Gone: time.Now(), Cleanup: func(ctx context.Context) error {
		d.tried.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}}
}

// TestCloseSkipsResiduesPastTheirGone: Close does not try, for its release
// timeout, the cleanup of a residue whose Gone has passed: the store has
// dropped what it would remove (a Redis waiter's place, stale).
func TestCloseSkipsResiduesPastTheirGone(t *testing.T) {
	const releaseTimeout = time.Minute
	d := &goneResidueDriver{tableDriver: newTableDriver()}
	l, err := New(d, WithTTL(time.Second), WithReleaseTimeout(releaseTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(t.Context(), "k"); err == nil {
		t.Fatal("TryLock succeeded on a driver that fails every attempt")
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	// A bound, not a measurement: the residue's Gone has passed.
	const bound = 10 * time.Second
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(bound):
		t.Fatalf("Close still running after %v (release timeout %v): it must not try a cleanup past its residue's Gone", bound, releaseTimeout)
	}
}
