package postgres

import (
	"bytes"
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

// dataOf is the data read from lock_data (nil: none), in memory of its
// own.
func dataOf(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// SetData implements driver.DataSetter: lock_data changes on the holder's
// row, if it is still the lease's (owner and version) and held.
func (d *pgDriver) SetData(ctx context.Context, l driver.Lease, data []byte) error {
	s, ok := l.State.(*lockState)
	if !ok {
		return fmt.Errorf("setdata: %w: not a postgres lease", driver.ErrNotHeld)
	}
	n, err := d.q.exec(ctx, d.sql.setData, dataArg(data), s.key, s.owner, s.version)
	if err != nil {
		return classify(fmt.Errorf("setdata: %w", err))
	}
	if n == 0 {
		return fmt.Errorf("setdata: %w", driver.ErrNotHeld)
	}
	return nil
}
