package memory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// TestNewRefusesZeroStores: a Store not made by NewStore is refused by New
// and NewFaulty with an error naming it, never a panic later.
func TestNewRefusesZeroStores(t *testing.T) {
	for name, s := range map[string]*memory.Store{"zero": {}, "nil": nil} {
		l, err := memory.New(s)
		if err == nil {
			_ = l.Close()
			t.Errorf("New(%s store) must fail", name)
		} else if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "memory.Store") {
			t.Errorf("New(%s store) = %v; want an error matching ErrInvalidOption that names memory.Store", name, err)
		}
		l, _, err = memory.NewFaulty(s)
		if err == nil {
			_ = l.Close()
			t.Errorf("NewFaulty(%s store) must fail", name)
		} else if !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("NewFaulty(%s store) = %v; want an error matching ErrInvalidOption", name, err)
		}
	}
}
