package mysql

import (
	"context"
	"fmt"

	"github.com/golocker/locker/driver"
)

// Each acquiring statement carries a fence on the database clock, after
// which it takes nothing (driver.Fence). The undo of a statement whose
// outcome is unknown waits until the database clock has passed the fence,
// so that it runs after anything the statement can still do, whatever
// connection either travels on.

// queryNow reads the database clock (µs since the epoch).
func (d *sqlDriver) queryNow(ctx context.Context) (int64, error) {
	var now int64
	if err := d.db.QueryRowContext(ctx, d.sql.now).Scan(&now); err != nil {
		return 0, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}

// residue wraps the error of an acquiring statement whose outcome is
// unknown in a driver.Residue whose cleanup gives up the row if owner took
// it, once the statement's fence has passed.
func (d *sqlDriver) residue(err error, key, owner string, f driver.Fence) error {
	return &driver.Residue{Err: err, Cleanup: func(ctx context.Context) error {
		return d.undoAcquire(ctx, key, owner, f)
	}}
}

// undoAcquire gives up the row if owner took it in a statement fenced by
// f. It waits until the database clock is past f first, so that the
// statement can take nothing afterwards. It returns driver.ErrNotHeld when
// there is nothing to give up.
func (d *sqlDriver) undoAcquire(ctx context.Context, key, owner string, f driver.Fence) error {
	if err := d.clock.AwaitFence(ctx, f, d.queryNow); err != nil {
		return fmt.Errorf("undo: %w", classify(err))
	}
	res, err := d.undo.ExecContext(ctx, key, owner)
	if err != nil {
		return fmt.Errorf("undo: %w", classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("undo: %w", err)
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	d.logger.Debug("locker: mysql: gave up a row taken by an acquisition with an unknown outcome", "key", key)
	return nil
}
