package locker

import (
	"errors"
	"strings"
	"testing"
)

// TestDataNeedsADataSetter: on a driver that is no driver.DataSetter,
// WithData is refused by TryLock and CheckLockOptions, naming the
// backend, and SetData answers errors.ErrUnsupported.
func TestDataNeedsADataSetter(t *testing.T) {
	e := newTestEngine(t, newTableDriver())
	ctx := t.Context()
	_, err := e.TryLock(ctx, "k", WithData([]byte("x")))
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "table backend cannot store data") {
		t.Errorf("TryLock(WithData) = %v; want ErrInvalidOption naming the backend", err)
	}
	if err := e.CheckLockOptions(WithData([]byte("x"))); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("CheckLockOptions(WithData) = %v; want ErrInvalidOption", err)
	}
	if err := e.CheckLockOptions(WithData(nil)); err != nil {
		t.Errorf("CheckLockOptions(WithData(nil)) = %v; want nil (no data)", err)
	}
	lk, err := e.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	if err := SetData(ctx, lk, []byte("x")); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SetData = %v; want errors.ErrUnsupported", err)
	}
}
