package locker

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestSetLimitNeedsLimiter checks that SetLimit on a backend whose driver
// shares keys but is no driver.Limiter is refused, naming the backend, and
// that the Semaphore keeps its limit; and that bad input is refused before
// any store work.
func TestSetLimitNeedsLimiter(t *testing.T) {
	l, err := New(&sharedTable{tableDriver: newTableDriver(), held: make(map[string]bool)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sem, err := NewSemaphore(l, "k", 2)
	if err != nil {
		t.Fatal(err)
	}
	err = sem.SetLimit(t.Context(), 3)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "table backend cannot change a semaphore's limit") {
		t.Errorf("SetLimit on a driver without driver.Limiter: got %v, want ErrUnsupported naming the table backend", err)
	}
	if sem.Limit() != 2 {
		t.Errorf("a refused SetLimit changed the Semaphore's limit to %d", sem.Limit())
	}
	for _, n := range []int{0, -1} {
		if err := SetLimit(t.Context(), l, "k", n); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "limit") {
			t.Errorf("SetLimit(%d): got %v, want ErrInvalidOption naming the limit", n, err)
		}
	}
	var nilCtx context.Context
	if err := SetLimit(nilCtx, l, "k", 2); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("SetLimit with a nil ctx: got %v, want ErrInvalidOption", err)
	}
	var plain Locker = struct{ Locker }{l} // a wrapper that does not pass SetLimit on
	if err := SetLimit(context.Background(), plain, "k", 2); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SetLimit on a Locker that is no LimitSetter: got %v, want ErrUnsupported", err)
	}
}
