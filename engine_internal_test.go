package locker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/rerun"
)

// tableDriver is a minimal in-process driver for testing the engine's own
// bookkeeping (batching, deadlines, gates) independently of any backend. The
// backends themselves are tested against real servers.
type tableDriver struct {
	mu      sync.Mutex
	owners  map[string]string
	seq     uint64
	batches atomic.Int64 // RenewBatch calls
	renewed atomic.Int64 // leases renewed
	hang    atomic.Bool  // renewals block until ctx ends
	prompt  bool         // Info promises PromptCancel
}

func newTableDriver() *tableDriver { return &tableDriver{owners: make(map[string]string)} }

func (d *tableDriver) Info() driver.Info {
	return driver.Info{Name: "table", MaxKeyBytes: 16, PromptCancel: d.prompt}
}

func (d *tableDriver) TryAcquire(_ context.Context, r driver.Request) (driver.Grant, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.owners[r.Key]; ok {
		return driver.Grant{}, driver.Held(r.TTL)
	}
	d.seq++
	d.owners[r.Key] = r.Owner
	return driver.Grant{Token: d.seq}, nil
}

func (d *tableDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	d.batches.Add(1)
	if d.hang.Load() {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := make([]time.Duration, len(ls))
	errs := make([]error, len(ls))
	for i, l := range ls {
		if d.owners[l.Key] != l.Owner {
			errs[i] = driver.ErrNotHeld
		}
	}
	d.renewed.Add(int64(len(ls)))
	return v, errs, nil
}

func (d *tableDriver) Release(_ context.Context, l driver.Lease) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.owners[l.Key] != l.Owner {
		return driver.ErrNotHeld
	}
	delete(d.owners, l.Key)
	return nil
}

func (d *tableDriver) Close() error { return nil }

func newTestEngine(t *testing.T, d driver.Driver, opts ...Option) *engine {
	t.Helper()
	l, err := New(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.(*engine)
}

func TestRenewalIsBatched(t *testing.T) {
	const ttl = time.Second
	// A round whose locks were lost while the process stalled runs again
	// (rerun.Stalled). Renewals one by one fail at once.
	rerun.Stalled(t, 3, ttl, func(int) error {
		d := newTableDriver()
		e := newTestEngine(t, d, WithTTL(ttl))
		const n = 500
		locks := make([]Lock, n)
		for i := range locks {
			lk, err := e.TryLock(t.Context(), string(rune('a'+i%26))+time.Duration(i).String())
			if err != nil {
				t.Fatal(err)
			}
			locks[i] = lk
		}
		// Every lock renewed 5 times (about 2 TTLs on a quiet machine; no
		// timing is asserted, only a bound that a stuck watchdog cannot meet).
		for deadline := time.Now().Add(30 * time.Second); d.renewed.Load() < 5*n; time.Sleep(10 * time.Millisecond) {
			if err := firstErr(locks); err != nil {
				return fmt.Errorf("lock lost after %d renewals: %w", d.renewed.Load(), err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("locks were not renewed: %d renewals for %d locks in 30 s", d.renewed.Load(), n)
			}
		}
		batches, renewed := d.batches.Load(), d.renewed.Load()
		if err := firstErr(locks); err != nil {
			return fmt.Errorf("lock lost: %w", err)
		}
		t.Logf("%d locks: %d renewals in %d RenewBatch calls", n, renewed, batches)
		if perBatch := renewed / batches; perBatch < n/4 {
			t.Fatalf("renewals must be batched: %d calls for %d renewals", batches, renewed)
		}
		return nil
	})
}

func TestDoneClosesAtLocalDeadlineWhenRenewalHangs(t *testing.T) {
	d := newTableDriver()
	ttl := 300 * time.Millisecond
	e := newTestEngine(t, d, WithTTL(ttl))
	start := time.Now()
	lk, err := e.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	d.hang.Store(true)
	select {
	case <-lk.Done():
	case <-time.After(10 * ttl):
		t.Fatal("Done must close when renewals hang past the local deadline")
	}
	// Not a timing assertion on speed: the contract is an upper bound.
	if time.Since(start) < ttl/3 {
		t.Fatal("Done closed before any renewal was due")
	}
	if !errors.Is(lk.Err(), ErrLost) {
		t.Fatalf("Err: want ErrLost, got %v", lk.Err())
	}
}

func TestCancelledWaitsLeaveNoGates(t *testing.T) {
	d := newTableDriver()
	e := newTestEngine(t, d, WithTTL(time.Second))
	lk, err := e.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
			defer cancel()
			if _, err := e.Lock(ctx, "k"); !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("want ErrNotAcquired and DeadlineExceeded, got %v", err)
			}
		}()
	}
	wg.Wait()
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	gates := len(e.gates)
	e.mu.Unlock()
	if gates != 0 {
		t.Fatalf("cancelled waits left %d local waiter entries", gates)
	}
}

func TestKeyLimitIsNamed(t *testing.T) {
	e := newTestEngine(t, newTableDriver(), WithPrefix("pre:"))
	_, err := e.TryLock(t.Context(), "0123456789abc") // 17 bytes with prefix
	if !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("want ErrInvalidKey, got %v", err)
	}
	if want := "allows at most 16"; !contains(err.Error(), want) {
		t.Fatalf("error must name the limit (%q): %v", want, err)
	}
	lk, err := e.TryLock(t.Context(), "0123456789ab") // exactly 16
	if err != nil {
		t.Fatalf("a key at the limit must work: %v", err)
	}
	lk.Unlock(t.Context())
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestAbandonedLockIsReleased(t *testing.T) {
	d := newTableDriver()
	ttl := 300 * time.Millisecond
	e := newTestEngine(t, d, WithTTL(ttl))
	lk, err := e.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	d.hang.Store(true)
	await(t, lk.Done(), "the lock's Done did not close while its renewals hung")
	d.hang.Store(false)
	// The store still has the lock (stores like etcd and ZooKeeper keep it
	// while the Locker's lease or session lives): the engine must give it back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		d.mu.Lock()
		_, held := d.owners["k"]
		d.mu.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a lock lost at the local deadline must be released in the store once it answers again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkEngineOverhead measures what the engine adds to a TryLock+Unlock
// over an in-process driver that costs nothing: the part of a backend's
// ratio to its raw floor that is ours rather than the store's. The Observer
// sub-benchmark adds an observer that does nothing, for the price of the
// events. Both use a driver that promises PromptCancel, as memory does, and
// a ctx that never ends. The NoPromise ones use a driver that does not
// promise it: with a ctx that never ends (Background) and with a
// cancellable one (Cancellable), whose calls each run in a worker.
func BenchmarkEngineOverhead(b *testing.B) {
	run := func(b *testing.B, prompt, cancellable bool, opts ...Option) {
		d := newTableDriver()
		d.prompt = prompt
		l, err := New(d, opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		if cancellable {
			ctx = b.Context()
		}
		b.ReportAllocs()
		for b.Loop() {
			lk, err := l.TryLock(ctx, "k")
			if err != nil {
				b.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("NoObserver", func(b *testing.B) { run(b, true, false) })
	b.Run("Observer", func(b *testing.B) { run(b, true, false, WithObserver(ObserverFunc(func(Event) {}))) })
	b.Run("NoPromise/Background", func(b *testing.B) { run(b, false, false) })
	b.Run("NoPromise/Cancellable", func(b *testing.B) { run(b, false, true) })
	b.Run("RoundTrip", benchRoundTrip)
}

// benchRoundTrip is BenchmarkEngineOverhead on a driver without
// PromptCancel whose TryAcquire and Release each make a round trip to
// another process (cat), as a store's client does to a store on the same
// machine: inline (a ctx that never ends) and detached (a cancellable
// one), in blocks of 50 iterations, with the median of each reported
// (background-p50-ns, cancellable-p50-ns) and their ratio
// (cancellable-x-background).
func benchRoundTrip(b *testing.B) {
	cat, err := exec.LookPath("cat")
	if err != nil {
		b.Skip("no cat to make round trips to")
	}
	cmd := exec.Command(cat)
	w, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Close(); _ = cmd.Wait() })
	d := &rttDriver{tableDriver: newTableDriver(), w: w, r: r}
	l, err := New(d)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	kinds := []context.Context{context.Background(), b.Context()}
	times := make([][]time.Duration, len(kinds))
	for it := 0; b.Loop(); it++ {
		k := (it / 50) % 2
		t0 := time.Now()
		lk, err := l.TryLock(kinds[k], "k")
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(kinds[k]); err != nil {
			b.Fatal(err)
		}
		times[k] = append(times[k], time.Since(t0))
	}
	p50 := func(ds []time.Duration) float64 {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return float64(ds[len(ds)/2])
	}
	bg, cc := p50(times[0]), p50(times[1])
	b.ReportMetric(bg, "background-p50-ns")
	b.ReportMetric(cc, "cancellable-p50-ns")
	if bg > 0 {
		b.ReportMetric(cc/bg, "cancellable-x-background")
	}
}

// rttDriver is a tableDriver without PromptCancel whose TryAcquire and
// Release each first make a one-byte round trip through w and r.
type rttDriver struct {
	*tableDriver
	mu sync.Mutex
	w  io.Writer
	r  io.Reader
}

func (d *rttDriver) roundTrip() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var buf [1]byte
	if _, err := d.w.Write(buf[:]); err != nil {
		return err
	}
	_, err := io.ReadFull(d.r, buf[:])
	return err
}

func (d *rttDriver) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if err := d.roundTrip(); err != nil {
		return driver.Grant{}, err
	}
	return d.tableDriver.TryAcquire(ctx, r)
}

func (d *rttDriver) Release(ctx context.Context, l driver.Lease) error {
	if err := d.roundTrip(); err != nil {
		return err
	}
	return d.tableDriver.Release(ctx, l)
}

// stalledWatchdog returns an engine on d whose watchdog, once renewals
// hang, gets stuck reporting the loss of a lock on "a" (an observer that
// blocks), as a starved process's would run late: it is stuck once the
// returned channel is closed, and the lock on "a" is taken.
func stalledWatchdog(t *testing.T, d *tableDriver) (*engine, <-chan struct{}) {
	stalled, stall := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e := newTestEngine(t, d, WithTTL(300*time.Millisecond), WithObserver(ObserverFunc(func(ev Event) {
		if ev.Kind == EventLost && ev.Key == "a" {
			once.Do(func() { close(stalled) })
			<-stall
		}
	})))
	t.Cleanup(func() { close(stall) }) // before the engine's Close, which waits for the watchdog
	if _, err := e.TryLock(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the next lock's deadline comes after a's
	return e, stalled
}

// TestDoneTellsTheDeadlineWhenTheWatchdogIsLate: Done and Err of a lock
// past its local deadline report the loss when they are asked, even while
// the watchdog that would end it is held up.
func TestDoneTellsTheDeadlineWhenTheWatchdogIsLate(t *testing.T) {
	d := newTableDriver()
	e, stalled := stalledWatchdog(t, d)
	b, err := e.TryLock(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	d.hang.Store(true)
	await(t, stalled, "the watchdog did not report the loss of the lock on \"a\" while its renewals hung")
	time.Sleep(time.Until(b.Deadline()) + time.Millisecond)
	select {
	case <-b.Done():
	default:
		t.Fatal("Done of a lock past its deadline is still open while the watchdog is late")
	}
	if !errors.Is(b.Err(), ErrLost) || !errors.Is(b.Err(), ErrNoRenewal) {
		t.Fatalf("Err: want ErrLost and ErrNoRenewal, got %v", b.Err())
	}
}

// TestDoContextTellsTheDeadlineWhenTheWatchdogIsLate: the same for the ctx
// of Do's function, which only its Err is asked.
func TestDoContextTellsTheDeadlineWhenTheWatchdogIsLate(t *testing.T) {
	d := newTableDriver()
	e, stalled := stalledWatchdog(t, d)
	err := Do(t.Context(), e, "b", func(ctx context.Context) error {
		nested, err := e.TryLock(ctx, "b") // the same hold: its Deadline
		if err != nil {
			return err
		}
		deadline := nested.Deadline()
		d.hang.Store(true)
		await(t, stalled, "the watchdog did not report the loss of the lock on \"a\" while its renewals hung")
		time.Sleep(time.Until(deadline) + time.Millisecond)
		if ctx.Err() == nil {
			t.Error("the ctx of Do's function is still live past the lock's deadline while the watchdog is late")
		} else if !errors.Is(context.Cause(ctx), ErrLost) {
			t.Errorf("cause: want ErrLost, got %v", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, ErrLost) {
		t.Fatalf("Do: want ErrLost, got %v", err)
	}
}

// TestDoLostBeforeRelease: when the lock vanished from the store while fn
// ran and the Locker had not noticed yet (no renewal in between), Do's
// release finds it gone, and Do reports the loss; also when the driver
// reports the loss (Request.Lost) while the release is under way, which
// ends the hold without a loss (ZooKeeper's watch on the holder's node).
func TestDoLostBeforeRelease(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lostFirst bool
	}{{"release finds it gone", false}, {"driver reports it during the release", true}} {
		t.Run(tc.name, func(t *testing.T) {
			d := &lostOnRelease{tableDriver: newTableDriver(), lostFirst: tc.lostFirst}
			e := newTestEngine(t, d, WithTTL(time.Minute))
			fnErr := errors.New("the function's error")
			err := Do(t.Context(), e, "k", func(context.Context) error {
				d.mu.Lock()
				delete(d.owners, "k") // behind the holder's back
				d.mu.Unlock()
				return fnErr
			})
			if !errors.Is(err, ErrLost) || !errors.Is(err, fnErr) {
				t.Fatalf("Do = %v; want an error matching ErrLost and the function's error", err)
			}
		})
	}
}

// lostOnRelease is the table driver whose Release, with lostFirst, reports
// a lease gone through its Request.Lost before returning ErrNotHeld.
type lostOnRelease struct {
	*tableDriver
	lostFirst bool
	lost      sync.Map // key → Request.Lost
}

func (d *lostOnRelease) TryAcquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := d.tableDriver.TryAcquire(ctx, r)
	if err == nil && r.Lost != nil {
		d.lost.Store(r.Key, r.Lost)
	}
	return g, err
}

func (d *lostOnRelease) Release(ctx context.Context, l driver.Lease) error {
	err := d.tableDriver.Release(ctx, l)
	if lost, ok := d.lost.Load(l.Key); ok && d.lostFirst && errors.Is(err, driver.ErrNotHeld) {
		lost.(func(error))(errors.New("the node was deleted"))
	}
	return err
}

// hangBound bounds the waits of the engine's tests for what the engine
// must do: each comes at once unless the engine is broken, and the bound
// only keeps a broken engine from hanging the package until go test's
// timeout.
const hangBound = time.Minute

// await returns what ch delivers (or its zero value once it is closed),
// and fails t with what, saying what did not happen, when nothing comes
// within hangBound.
func await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(hangBound)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s (waited %v)", what, hangBound)
		var zero T
		return zero
	}
}
