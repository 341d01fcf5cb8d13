package locker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/leakcheck"
	"github.com/golocker/locker/memory"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func newPair(t *testing.T, opts ...locker.Option) (a, b locker.Locker, store *memory.Store) {
	t.Helper()
	store = memory.NewStore()
	opts = append([]locker.Option{locker.WithTTL(time.Second)}, opts...)
	a, err := memory.New(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err = memory.New(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, store
}

func TestBadOptionsNameTheOption(t *testing.T) {
	store := memory.NewStore()
	cases := []struct {
		name string
		opt  locker.Option
	}{
		{"WithTTL", locker.WithTTL(0)},
		{"WithTTL", locker.WithTTL(-time.Second)},
		{"WithOwnerLabel", locker.WithOwnerLabel("")},
		{"WithBackoff", locker.WithBackoff(nil)},
		{"WithLogger", locker.WithLogger(nil)},
		{"WithReleaseTimeout", locker.WithReleaseTimeout(0)},
		{"option 0 is nil", nil},
	}
	for _, c := range cases {
		l, err := memory.New(store, c.opt)
		if err == nil {
			l.Close()
			t.Fatalf("%s: a bad option value must make New fail", c.name)
		}
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s: error must match ErrInvalidOption and name the option, got %v", c.name, err)
		}
	}
	if _, err := memory.New(nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("nil store: want ErrInvalidOption, got %v", err)
	}
	if _, err := locker.New(nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("nil driver: want ErrInvalidOption, got %v", err)
	}
}

func TestErrorMatchesSentinelAndCause(t *testing.T) {
	cause := errors.New("connection refused")
	err := error(&locker.Error{Op: "lock", Backend: "redis", Key: "job", Err: locker.ErrNotAcquired, Cause: cause})
	if !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, cause) {
		t.Fatalf("Error must unwrap to its sentinel and its cause: %v", err)
	}
	var le *locker.Error
	if !errors.As(err, &le) || le.Op != "lock" || le.Key != "job" {
		t.Fatalf("errors.As must find *locker.Error: %v", err)
	}
	if got, want := err.Error(), `locker: lock redis "job": not acquired: connection refused`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	long := (&locker.Error{Op: "lock", Key: strings.Repeat("é", 100), Err: locker.ErrInvalidKey}).Error()
	if len(long) > 120 {
		t.Errorf("long keys must be shortened in messages, got %d bytes", len(long))
	}
}

func TestInvalidKeys(t *testing.T) {
	a, _, _ := newPair(t, locker.WithPrefix("ns:"))
	ctx := t.Context()
	for _, k := range []string{"", "bad\xff"} {
		if _, err := a.TryLock(ctx, k); !errors.Is(err, locker.ErrInvalidKey) {
			t.Errorf("TryLock(%q): want ErrInvalidKey, got %v", k, err)
		}
		if _, err := a.Lock(ctx, k); !errors.Is(err, locker.ErrInvalidKey) {
			t.Errorf("Lock(%q): want ErrInvalidKey, got %v", k, err)
		}
	}
}

func TestBackoffIsPure(t *testing.T) {
	b := locker.ExponentialBackoff(10*time.Millisecond, 80*time.Millisecond)
	want := []time.Duration{10, 20, 40, 80, 80, 80}
	for round := 0; round < 2; round++ {
		for i, w := range want {
			if got := b(i); got != w*time.Millisecond {
				t.Fatalf("round %d attempt %d: got %v want %v", round, i, got, w*time.Millisecond)
			}
		}
	}
	if got := b(1 << 30); got != 80*time.Millisecond {
		t.Fatalf("huge attempt: got %v", got)
	}
	if got := locker.ConstantBackoff(time.Second)(7); got != time.Second {
		t.Fatalf("constant: got %v", got)
	}
}

func TestLockContextBoundsOnlyTheWait(t *testing.T) {
	a, b, _ := newPair(t)
	ctx, cancel := context.WithCancel(t.Context())
	lk, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := b.TryLock(t.Context(), "k"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("cancelling Lock's ctx must not release the lock: %v", err)
	}
	if err := lk.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(t.Context()); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("second Unlock: want ErrNotHeld, got %v", err)
	}
	if lk.Err() != nil {
		t.Fatalf("Err after a clean Unlock must be nil, got %v", lk.Err())
	}
}

func TestWaitEndsWithCtxError(t *testing.T) {
	a, b, _ := newPair(t)
	lk, err := a.Lock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(context.Background())
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
		_, err := b.Lock(ctx, "k")
		cancel()
		if !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want ErrNotAcquired and DeadlineExceeded, got %v", err)
		}
	}
	// The same Locker: a second Lock without Do's ctx waits like anyone.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := a.Lock(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("a second Lock on a held key without Do's ctx must wait, got %v", err)
	}
	if _, err := a.TryLock(t.Context(), "k"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryLock on a key this Locker holds must fail, got %v", err)
	}
}

func TestDo(t *testing.T) {
	a, b, store := newPair(t)
	ctx := t.Context()
	sentinel := errors.New("job failed")
	if err := locker.Do(ctx, a, "job", func(context.Context) error { return sentinel }); !errors.Is(err, sentinel) {
		t.Fatalf("Do must return fn's error, got %v", err)
	}
	if lk, err := b.TryLock(ctx, "job"); err != nil {
		t.Fatalf("Do must release after fn: %v", err)
	} else {
		lk.Unlock(ctx)
	}

	// fn's ctx is cancelled with ErrLost when the lock is lost.
	err := locker.Do(ctx, a, "job", func(ctx context.Context) error {
		store.DeleteKey("job")
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			return errors.New("ctx not cancelled after the lock was lost")
		}
		if !errors.Is(context.Cause(ctx), locker.ErrLost) {
			return errors.New("cause must match ErrLost")
		}
		return nil
	})
	if !errors.Is(err, locker.ErrLost) {
		t.Fatalf("Do must report a lost lock, got %v", err)
	}

	// A cancelled caller ctx still releases.
	cctx, cancel := context.WithCancel(ctx)
	_ = locker.Do(cctx, a, "job", func(context.Context) error { cancel(); return nil })
	if lk, err := b.TryLock(ctx, "job"); err != nil {
		t.Fatalf("Do must release with a fresh ctx after its ctx was cancelled: %v", err)
	} else if err := locker.TryDo(ctx, a, "job", func(context.Context) error { t.Error("fn ran"); return nil }); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryDo on a held key: want ErrNotAcquired, got %v", err)
	} else {
		lk.Unlock(ctx)
	}

	if err := locker.Do(ctx, nil, "k", func(context.Context) error { return nil }); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("nil Locker: want ErrInvalidOption, got %v", err)
	}
	if err := locker.Do(ctx, a, "k", nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("nil fn: want ErrInvalidOption, got %v", err)
	}
}

func TestReentrancyThreeDeep(t *testing.T) {
	a, b, _ := newPair(t)
	ctx := t.Context()
	var depth atomic.Int32
	err := locker.Do(ctx, a, "r", func(ctx context.Context) error {
		outer, err := a.Lock(ctx, "r")
		if err != nil {
			return err
		}
		return locker.Do(ctx, a, "r", func(ctx context.Context) error {
			inner, err := a.TryLock(ctx, "r")
			if err != nil {
				return err
			}
			if inner.Token() != outer.Token() {
				t.Error("a nested hold must share the outer token")
			}
			depth.Store(3)
			if err := inner.Unlock(ctx); err != nil {
				return err
			}
			if err := inner.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
				t.Errorf("second nested Unlock: want ErrNotHeld, got %v", err)
			}
			if _, err := b.TryLock(ctx, "r"); !errors.Is(err, locker.ErrNotAcquired) {
				t.Errorf("a nested Unlock must not release the lock: %v", err)
			}
			return outer.Unlock(ctx)
		})
	})
	if err != nil || depth.Load() != 3 {
		t.Fatalf("reentrant Do: %v (depth %d)", err, depth.Load())
	}
	lk, err := b.TryLock(ctx, "r")
	if err != nil {
		t.Fatalf("the outermost Do must release: %v", err)
	}
	lk.Unlock(ctx)
}

func TestCloseEndsWaitsAndLocks(t *testing.T) {
	a, b, _ := newPair(t)
	// A bound for the wait that Close must end: without it, a Close
	// that missed the wait would leave the test waiting for ever.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	held, err := b.Lock(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	mine, err := a.Lock(ctx, "mine")
	if err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { _, err := a.Lock(ctx, "w"); waitErr <- err }()
	time.Sleep(20 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waitErr; !errors.Is(err, locker.ErrClosed) {
		t.Fatalf("a wait in progress must end with ErrClosed, got %v", err)
	}
	select {
	case <-mine.Done():
	default:
		t.Fatal("Close must close every held lock's Done")
	}
	if !errors.Is(mine.Err(), locker.ErrLost) {
		t.Fatalf("Err after Close must match ErrLost, got %v", mine.Err())
	}
	if _, err := a.TryLock(ctx, "x"); !errors.Is(err, locker.ErrClosed) {
		t.Fatalf("TryLock after Close: want ErrClosed, got %v", err)
	}
	if err := mine.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("Unlock after Close: want ErrNotHeld, got %v", err)
	}
	lk, err := b.TryLock(ctx, "mine")
	if err != nil {
		t.Fatalf("Close must release its locks: %v", err)
	}
	lk.Unlock(ctx)
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestIsolatedHolderLosesBeforeExpiry(t *testing.T) {
	store := memory.NewStore()
	// A TTL of 1 s leaves the local deadline a 100 ms margin before the
	// store's expiry: room for scheduling delays on a loaded machine.
	a, fault, err := memory.NewFaulty(store, locker.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _ := memory.New(store, locker.WithTTL(time.Second))
	defer b.Close()
	lk, err := a.Lock(t.Context(), "iso")
	if err != nil {
		t.Fatal(err)
	}
	fault.Cut()
	for {
		other, err := b.TryLock(t.Context(), "iso")
		if err == nil {
			select {
			case <-lk.Done():
			default:
				t.Fatal("Done must close before the store gives the key to someone else")
			}
			other.Unlock(t.Context())
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !errors.Is(lk.Err(), locker.ErrLost) {
		t.Fatalf("Err: want ErrLost, got %v", lk.Err())
	}
	fault.Heal()
	if err := lk.Unlock(t.Context()); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("stale Unlock: want ErrNotHeld, got %v", err)
	}
}

// TestForceUnlockFreeKeyText checks that ForceUnlock of a free key says
// nobody holds it, not that the caller is not its owner: a forced unlock
// has no owner.
func TestForceUnlockFreeKeyText(t *testing.T) {
	a, _, _ := newPair(t)
	err := locker.ForceUnlock(t.Context(), a, "free")
	if !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("ForceUnlock of a free key: got %v, want an error matching ErrNotHeld", err)
	}
	if msg := err.Error(); strings.Contains(msg, "owner") || !strings.Contains(msg, "nobody holds") {
		t.Errorf("ForceUnlock of a free key: %q should say nobody holds the key, and name no owner", msg)
	}
}
