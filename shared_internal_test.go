package locker

import (
	"errors"
	"strings"
	"testing"
)

// TestSharedNeedsSharer checks that a semaphore or read-write lock on a
// backend whose driver is no driver.Sharer is refused at once, naming the
// backend.
func TestSharedNeedsSharer(t *testing.T) {
	l, err := New(newTableDriver())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, serr := NewSemaphore(l, "k", 2)
	_, rerr := NewRWMutex(l, "k")
	_, lerr := l.(SharedLocker).TryLockShared(t.Context(), "k", Share{Mode: Read})
	for _, err := range []error{serr, rerr, lerr} {
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "table backend has no shared holds") {
			t.Errorf("got %v, want ErrInvalidOption naming the table backend", err)
		}
	}
}

// TestCheckShare checks the validation of shared holds.
func TestCheckShare(t *testing.T) {
	for _, s := range []Share{
		{Mode: Permits, Limit: 0},
		{Mode: Permits, Limit: -1},
		{Mode: Permits, Limit: 2, Weight: 3},
		{Mode: Permits, Limit: 2, Weight: -1},
		{Mode: Read, Limit: 2},
		{Mode: Write, Weight: 2},
		{Mode: 9},
	} {
		if _, err := checkShare(s); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("checkShare(%+v) = %v, want ErrInvalidOption", s, err)
		}
	}
	if ds, err := checkShare(Share{Mode: Permits, Limit: 2}); err != nil || ds.Weight != 1 {
		t.Errorf("checkShare of one permit = %+v, %v; want weight 1", ds, err)
	}
}
