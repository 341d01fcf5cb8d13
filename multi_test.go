package locker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

func TestLockMultiRefusesBadInput(t *testing.T) {
	a, _, _ := newPair(t)
	ctx := t.Context()
	var nilCtx context.Context
	cases := []struct {
		name string
		ctx  context.Context
		l    locker.Locker
		keys []string
		want error
	}{
		{"nil ctx", nilCtx, a, []string{"a"}, locker.ErrInvalidOption},
		{"nil Locker", ctx, nil, []string{"a"}, locker.ErrInvalidOption},
		{"no keys", ctx, a, nil, locker.ErrInvalidOption},
		{"duplicate", ctx, a, []string{"a", "b", "a"}, locker.ErrInvalidKey},
		{"empty key", ctx, a, []string{"a", ""}, locker.ErrInvalidKey},
		{"invalid UTF-8", ctx, a, []string{"a", "\xff"}, locker.ErrInvalidKey},
	}
	for _, tc := range cases {
		for _, wait := range []bool{true, false} {
			var err error
			if wait {
				_, err = locker.LockMulti(tc.ctx, tc.l, tc.keys)
			} else {
				_, err = locker.TryLockMulti(tc.ctx, tc.l, tc.keys)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("%s (wait %v): got %v, want an error matching %v", tc.name, wait, err, tc.want)
			}
		}
		if err := locker.DoMulti(tc.ctx, tc.l, tc.keys, func(context.Context) error { return nil }); !errors.Is(err, tc.want) {
			t.Errorf("%s: DoMulti: got %v, want an error matching %v", tc.name, err, tc.want)
		}
	}
	if err := locker.DoMulti(ctx, a, []string{"a"}, nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("DoMulti with a nil function: got %v, want ErrInvalidOption", err)
	}
	// "a" sorts first, so it was taken before "\xff" was refused: it must
	// be free again.
	lk, err := a.TryLock(ctx, "a")
	if err != nil {
		t.Fatalf("a key taken before an invalid one must be released: %v", err)
	}
	_ = lk.Unlock(ctx)
}

func TestMultiLockAccessors(t *testing.T) {
	a, b, _ := newPair(t)
	ctx := t.Context()
	m, err := locker.LockMulti(ctx, a, []string{"sku:9", "sku:1", "sku:7"})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Keys(); len(got) != 3 || got[0] != "sku:1" || got[2] != "sku:9" {
		t.Errorf("Keys = %q, want them in byte order", got)
	}
	for _, k := range m.Keys() {
		if m.Token(k) == 0 {
			t.Errorf("Token(%q) = 0, want the key's token", k)
		}
		if _, err := b.TryLock(ctx, k); !errors.Is(err, locker.ErrNotAcquired) {
			t.Errorf("TryLock(%q) from another Locker: got %v, want ErrNotAcquired", k, err)
		}
	}
	if m.Token("sku:2") != 0 {
		t.Errorf("Token of a key not held must be 0")
	}
	if m.Deadline().IsZero() {
		t.Errorf("Deadline is zero")
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
	default:
		t.Errorf("Done must be closed after Unlock")
	}
	if err := m.Err(); err != nil {
		t.Errorf("Err after Unlock = %v, want nil", err)
	}
	if err := m.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("second Unlock: got %v, want ErrNotHeld", err)
	}
	if _, err := locker.TryLockMulti(ctx, b, []string{"sku:1", "sku:7", "sku:9"}); err != nil {
		t.Errorf("the keys must be free after Unlock: %v", err)
	}
}

func TestDoMultiPanicReleases(t *testing.T) {
	a, b, _ := newPair(t)
	ctx := t.Context()
	keys := []string{"x", "y"}
	func() {
		defer func() { _ = recover() }()
		_ = locker.DoMulti(ctx, a, keys, func(ctx context.Context) error {
			// Reentrant inside fn's ctx.
			if err := locker.TryDo(ctx, a, "y", func(context.Context) error { return nil }); err != nil {
				t.Errorf("TryDo on a key DoMulti holds, inside its ctx: %v", err)
			}
			panic("boom")
		})
	}()
	m, err := locker.TryLockMulti(ctx, b, keys)
	if err != nil {
		t.Fatalf("a panic in DoMulti's function must release its keys: %v", err)
	}
	_ = m.Unlock(ctx)
}

// BenchmarkLockMulti compares, uncontended on a memory store, a Lock and
// Unlock of one key with a LockMulti and Unlock of three.
func BenchmarkLockMulti(b *testing.B) {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := b.Context()
	b.Run("Lock1", func(b *testing.B) {
		for b.Loop() {
			lk, err := l.Lock(ctx, "a")
			if err != nil {
				b.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("LockMulti3", func(b *testing.B) {
		keys := []string{"a", "b", "c"}
		for b.Loop() {
			ml, err := locker.LockMulti(ctx, l, keys)
			if err != nil {
				b.Fatal(err)
			}
			if err := ml.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestLockMultiStopsWaitingWhenAHeldKeyIsLost(t *testing.T) {
	a, b, store := newPair(t, locker.WithPrefix("t/"))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	k2, err := b.TryLock(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Unlock(ctx)
	res := make(chan error, 1)
	go func() {
		m, err := locker.LockMulti(ctx, a, []string{"k2", "k1"})
		if err == nil {
			_ = m.Unlock(ctx)
		}
		res <- err
	}()
	// Wait until LockMulti holds k1 and waits for k2.
	for {
		st, err := locker.Inspect(ctx, b, "k1")
		if err != nil {
			t.Fatal(err)
		}
		if st.Held {
			break
		}
		time.Sleep(time.Millisecond)
	}
	store.DeleteKey("t/k1")
	err = <-res
	if !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, locker.ErrLost) {
		t.Fatalf("a LockMulti whose first key was lost while it waited for the second: got %v, want an error matching ErrNotAcquired and ErrLost", err)
	}
}

// TestLockMultiWithDataStoresIt: keys taken together with WithData carry
// it, although the one-operation take has no place for data.
func TestLockMultiWithDataStoresIt(t *testing.T) {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
	ml, err := locker.TryLockMulti(ctx, l, []string{"a", "b"}, locker.WithData([]byte("addr")))
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Unlock(ctx)
	for _, k := range []string{"a", "b"} {
		st, err := locker.Inspect(ctx, l, k)
		if err != nil {
			t.Fatal(err)
		}
		if string(st.Data) != "addr" {
			t.Errorf("key %s carries %q, want %q", k, st.Data, "addr")
		}
	}
}
