package mysql

import (
	"context"
	"fmt"

	"github.com/golocker/locker/driver"
)

// dataArg is the lock_data argument of an acquisition: NULL for none.
func dataArg(data []byte) any {
	if len(data) == 0 {
		return nil
	}
	return data
}

// SetData implements driver.DataSetter: lock_data changes on the holder's
// row, if it is still the lease's (owner and version) and held.
func (d *sqlDriver) SetData(ctx context.Context, l driver.Lease, data []byte) error {
	if _, ok := l.State.(*shareState); ok {
		return fmt.Errorf("setdata: %w: shared holds carry no data", driver.ErrPermanent)
	}
	s := leaseState(l)
	res, err := d.db.ExecContext(ctx, d.sql.setData, dataArg(data), s.key, s.owner, s.version)
	if err != nil {
		return fmt.Errorf("setdata: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("setdata: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("setdata: %w", driver.ErrNotHeld)
	}
	return nil
}
