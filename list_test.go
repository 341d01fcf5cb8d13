package locker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// TestListPrefix: the Locker's prefix is added once on the way to the
// store and taken off every key on the way back; keys under another
// Locker's prefix stay out; more than a page of keys all come back.
func TestListPrefix(t *testing.T) {
	store := memory.NewStore()
	app, err := memory.New(store, locker.WithPrefix("app/"))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	other, err := memory.New(store, locker.WithPrefix("other/"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := t.Context()
	n := locker.ListPage + 3
	for i := range n {
		if _, err := app.TryLock(ctx, fmt.Sprintf("job/%04d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := app.TryLock(ctx, "zzz"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryLock(ctx, "job/0000"); err != nil {
		t.Fatal(err)
	}
	got := 0
	for ks, err := range locker.List(ctx, app, "job/") {
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("job/%04d", got); ks.Key != want || !ks.Held {
			t.Fatalf("List yielded %q (held %v) as key %d; want %q, held, in order", ks.Key, ks.Held, got, want)
		}
		got++
	}
	if got != n {
		t.Errorf("List yielded %d keys, %d are held under the prefix", got, n)
	}
	all := 0
	for _, err := range locker.List(ctx, app, "") {
		if err != nil {
			t.Fatal(err)
		}
		all++
	}
	if all != n+1 {
		t.Errorf("List(\"\") yielded %d keys; the Locker holds %d under its prefix (another Locker's keys must stay out)", all, n+1)
	}
}

// TestListErrors: a nil ctx, a prefix that is not UTF-8 and a Locker that
// cannot list each yield one error naming the problem.
func TestListErrors(t *testing.T) {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var nilCtx context.Context
	for _, err := range locker.List(nilCtx, l, "") {
		if !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("List with a nil ctx: %v; want ErrInvalidOption", err)
		}
	}
	for _, err := range locker.List(t.Context(), l, "bad\xff") {
		if !errors.Is(err, locker.ErrInvalidKey) || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("List with a prefix that is not UTF-8: %v; want ErrInvalidKey naming UTF-8", err)
		}
	}
	for _, err := range locker.List(t.Context(), struct{ locker.Locker }{l}, "") {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("List of a Locker that cannot list: %v; want errors.ErrUnsupported", err)
		}
	}
}
