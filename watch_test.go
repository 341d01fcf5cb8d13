package locker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// notInspector is a Locker that cannot tell who holds a key.
type notInspector struct{ locker.Locker }

// TestWatchRefuses: Watch yields one error naming the problem, and ends,
// for a nil ctx, a bad option, a Locker that cannot inspect and a bad key.
func TestWatchRefuses(t *testing.T) {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		seq  func() func(func(locker.Status, error) bool)
		want error
		text string
	}{
		{"nil ctx", func() func(func(locker.Status, error) bool) { return locker.Watch(nil, l, "k") }, locker.ErrInvalidOption, "nil"},
		{"zero interval", func() func(func(locker.Status, error) bool) { return locker.Watch(ctx, l, "k", locker.WatchEvery(0)) }, locker.ErrInvalidOption, "WatchEvery"},
		{"nil option", func() func(func(locker.Status, error) bool) { return locker.Watch(ctx, l, "k", nil) }, locker.ErrInvalidOption, "nil"},
		{"no Inspector", func() func(func(locker.Status, error) bool) { return locker.Watch(ctx, notInspector{l}, "k") }, errors.ErrUnsupported, "cannot tell"},
		{"empty key", func() func(func(locker.Status, error) bool) { return locker.Watch(ctx, l, "") }, locker.ErrInvalidKey, "empty key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			for st, err := range tc.seq() {
				n++
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) || st.Held {
					t.Errorf("Watch yielded %+v, %v; want an error matching %v that says %q", st, err, tc.want, tc.text)
				}
				if n > 1 {
					t.Fatalf("Watch went on after its error")
				}
			}
			if n != 1 {
				t.Errorf("Watch yielded %d times; want one error", n)
			}
		})
	}
}

// TestWatchEndsWithCtx: a watch with nothing to report returns once its
// ctx ends, and a watch whose body breaks returns at once.
func TestWatchEndsWithCtx(t *testing.T) {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	n := 0
	for _, err := range locker.Watch(ctx, l, "k", locker.WatchEvery(time.Millisecond)) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Errorf("a free key that stayed free was reported %d times; want once", n)
	}
	for range locker.Watch(t.Context(), l, "k") {
		break
	}
}

// TestWatchEndsOnClose: closing the Locker ends a watch at once, with an
// error matching ErrClosed, however long its poll interval.
func TestWatchEndsOnClose(t *testing.T) {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ended := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		var last error
		first := true
		for _, err := range locker.Watch(ctx, l, "k", locker.WatchEvery(time.Hour)) {
			if first {
				close(started)
				first = false
			}
			last = err
		}
		ended <- last
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("Watch yielded no first status")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, locker.ErrClosed) {
			t.Errorf("the watch ended with %v, want an error matching ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("the watch did not end when its Locker was closed")
	}
}
