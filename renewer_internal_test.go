package locker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/golocker/locker/driver"
)

// cannotRenew is a driver that can neither Renew nor RenewBatch.
type cannotRenew struct{}

func (cannotRenew) Info() driver.Info { return driver.Info{Name: "norenew"} }
func (cannotRenew) TryAcquire(context.Context, driver.Request) (driver.Grant, error) {
	return driver.Grant{Token: 1}, nil
}
func (cannotRenew) Release(context.Context, driver.Lease) error { return nil }
func (cannotRenew) Close() error                                { return nil }

func TestNewRefusesADriverThatCannotRenew(t *testing.T) {
	l, err := New(cannotRenew{})
	if err == nil {
		l.Close()
		t.Fatal("New accepted a driver with neither Renew nor RenewBatch: its locks could never be renewed")
	}
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "norenew") || !strings.Contains(err.Error(), "driver.Renewer") {
		t.Errorf("New = %v; want ErrInvalidOption naming the backend and driver.Renewer", err)
	}
}
