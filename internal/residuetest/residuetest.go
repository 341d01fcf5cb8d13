// Package residuetest checks that a SQL backend's attempt whose statement
// never reached the server leaves nothing to undo. A backend's internal
// tests call it on a driver whose connections refuse, while told to, to
// write a statement.
package residuetest

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/golocker/locker/driver"
)

// Unsent makes d's attempt for req while refuse is set: every statement
// then fails before a byte of it is written, which the connections count
// in refused, and database/sql answers driver.ErrBadConn once its tries
// failed so. The attempt must fail with that error and carry no
// [driver.Residue], whose undo would be a needless statement. Once refuse
// is cleared, the key must be free: d takes and releases it.
func Unsent(ctx context.Context, t *testing.T, d driver.Driver, req driver.Request, refuse *atomic.Bool, refused *atomic.Int32) {
	t.Helper()
	refuse.Store(true)
	_, err := d.TryAcquire(ctx, req)
	refuse.Store(false)
	if refused.Load() == 0 {
		t.Fatalf("TryAcquire = %v without a statement refused: the test did not run as it means", err)
	}
	if !errors.Is(err, sqldriver.ErrBadConn) {
		t.Fatalf("TryAcquire = %v; want database/sql's driver.ErrBadConn after its tries", err)
	}
	var r *driver.Residue
	if errors.As(err, &r) {
		t.Fatalf("TryAcquire = %v carries a Residue; a statement never sent needs no undo", err)
	}
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("TryAcquire of the free key once statements reach the server: %v", err)
	}
	if err := d.Release(ctx, driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: req.TTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
}
