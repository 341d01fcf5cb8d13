package locker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/memory"
)

// wrapped hides every optional interface of the Locker it holds.
type wrapped struct{ locker.Locker }

// TestCheckLockOptionsFallback: a Locker that is not an OptionChecker gets
// the checks every Locker makes; a nil Locker is refused.
func TestCheckLockOptionsFallback(t *testing.T) {
	l, err := memory.New(memory.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w := wrapped{l}
	if err := locker.CheckLockOptions(w, locker.MinHold(time.Second), locker.MaxHold(2*time.Second)); err != nil {
		t.Errorf("good options: %v", err)
	}
	for name, opts := range map[string][]locker.LockOption{
		"negative MinHold":      {locker.MinHold(-1)},
		"MaxHold under MinHold": {locker.MinHold(2 * time.Second), locker.MaxHold(time.Second)},
		"nil option":            {nil},
	} {
		if err := locker.CheckLockOptions(w, opts...); !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("%s through a wrapper: %v; want ErrInvalidOption", name, err)
		}
	}
	if err := locker.CheckLockOptions(nil); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("nil Locker: %v; want ErrInvalidOption", err)
	}
}
