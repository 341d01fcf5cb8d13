package locker_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// TestDataRefused: data over MaxData is refused once, by the engine, with
// an error naming the option, the size and the limit, by TryLock,
// CheckLockOptions and SetData; so are data on a shared hold, WithData in
// Extend, and an owner label with a NUL byte. Exactly MaxData bytes pass.
func TestDataRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := memory.New(memory.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	over := make([]byte, locker.MaxData+1)
	refused := func(what string, err error, text ...string) {
		t.Helper()
		if !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("%s = %v; want an error matching ErrInvalidOption", what, err)
			return
		}
		for _, s := range text {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s = %v; want it to say %q", what, err, s)
			}
		}
	}
	_, err = l.TryLock(ctx, "k", locker.WithData(over))
	refused("TryLock(WithData) over MaxData", err, "WithData", "1025", "1024")
	refused("CheckLockOptions(WithData) over MaxData", locker.CheckLockOptions(l, locker.WithData(over)), "WithData", "1025")
	if st, err := locker.Inspect(ctx, l, "k"); err != nil || st.Held {
		t.Errorf("after a refused TryLock, Inspect = %+v, %v; want the key free", st, err)
	}

	lk, err := l.TryLock(ctx, "k", locker.WithData(make([]byte, locker.MaxData)))
	if err != nil {
		t.Fatalf("TryLock(WithData) of MaxData bytes: %v", err)
	}
	defer lk.Unlock(ctx)
	refused("SetData over MaxData", locker.SetData(ctx, lk, over), "SetData", "1025", "1024")
	refused("Extend(WithData)", locker.Extend(ctx, lk, locker.WithData([]byte("x"))), "WithData", "SetData")

	sem, err := locker.NewSemaphore(l, "sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sem.TryAcquire(ctx, locker.WithData([]byte("x")))
	refused("a semaphore permit with WithData", err, "WithData", "shared")
	permit, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer permit.Unlock(ctx)
	if err := locker.SetData(ctx, permit, []byte("x")); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SetData on a permit = %v; want an error matching errors.ErrUnsupported", err)
	}

	_, err = memory.New(memory.NewStore(), locker.WithOwnerLabel("a\x00b"))
	refused("WithOwnerLabel with a NUL byte", err, "WithOwnerLabel", "NUL")
}

// TestSetDataInsideDo: a nested hold inside Do changes the data of the
// lock it nests in; once released, it refuses with ErrNotHeld.
func TestSetDataInsideDo(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := memory.New(memory.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = locker.Do(ctx, l, "k", func(ctx context.Context) error {
		inner, err := l.TryLock(ctx, "k")
		if err != nil {
			return err
		}
		if err := locker.SetData(ctx, inner, []byte("inner")); err != nil {
			return err
		}
		if st, err := locker.Inspect(ctx, l, "k"); err != nil || string(st.Data) != "inner" {
			t.Errorf("Inspect after a nested hold's SetData = %q, %v; want data \"inner\"", st.Data, err)
		}
		if err := inner.Unlock(ctx); err != nil {
			return err
		}
		if err := locker.SetData(ctx, inner, []byte("x")); !errors.Is(err, locker.ErrNotHeld) {
			t.Errorf("SetData of a released nested hold = %v; want ErrNotHeld", err)
		}
		return nil
	}, locker.WithData([]byte("outer")))
	if err != nil {
		t.Fatal(err)
	}
}

// TestWatchSeesSetData: a SetData is a change Watch reports, with the new
// data, though holder and token stay (a leader proclaiming a new address).
func TestWatchSeesSetData(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	store := memory.NewStore()
	l, err := memory.New(store)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lk, err := l.TryLock(ctx, "leader", locker.WithData([]byte("10.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	n := 0
	for st, err := range locker.Watch(ctx, l, "leader", locker.WatchEvery(10*time.Millisecond)) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		switch {
		case n == 1 && bytes.Equal(st.Data, []byte("10.0.0.1")):
			if err := locker.SetData(ctx, lk, []byte("10.0.0.2")); err != nil {
				t.Fatal(err)
			}
		case n == 2 && bytes.Equal(st.Data, []byte("10.0.0.2")) && st.Token == lk.Token():
			return
		default:
			t.Fatalf("Watch yielded %+v as change %d", st, n)
		}
	}
	t.Fatalf("Watch ended after %d changes: %v; want the new data reported", n, ctx.Err())
}
