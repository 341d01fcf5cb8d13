package postgres

import (
	"context"
	"fmt"

	"github.com/golocker/locker/driver"
)

// Each acquiring statement carries a fence on the database clock, after
// which it takes nothing (driver.Fence). A statement whose outcome is
// unknown may still be on its way, held by a partition or queued in
// PgBouncer. Its undo waits until the database clock has passed the fence,
// so that it runs after anything the statement can still do, whatever
// connection either travels on.

// queryNow reads the database clock (µs since the epoch).
func (d *pgDriver) queryNow(ctx context.Context) (int64, error) {
	var now int64
	err := d.q.query(ctx, d.sql.now, nil, func(scan func(...any) error) error {
		return scan(&now)
	})
	if err != nil {
		return 0, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}

// residue wraps the error of an acquiring statement whose outcome is
// unknown in a driver.Residue whose cleanup frees the row if owner took
// it, once the statement's fence has passed.
func (d *pgDriver) residue(err error, key, owner string, f driver.Fence) error {
	return &driver.Residue{Err: err, Cleanup: func(ctx context.Context) error {
		return d.undoAcquire(ctx, key, owner, f)
	}}
}

// undoAcquire frees the row if owner took it in a statement fenced by f.
// It waits until the database clock is past f first, so that the
// statement can take nothing afterwards. It returns driver.ErrNotHeld when
// there is nothing to free.
func (d *pgDriver) undoAcquire(ctx context.Context, key, owner string, f driver.Fence) error {
	if err := d.clock.AwaitFence(ctx, f, d.queryNow); err != nil {
		return fmt.Errorf("undo: %w", classify(err))
	}
	n, err := d.freeing(ctx, d.sql.undo, key, owner, d.cfg.Table)
	if err != nil {
		return fmt.Errorf("undo: %w", classify(err))
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	d.logger.Debug("locker: postgres: freed a row taken by an acquisition with an unknown outcome", "key", key)
	return nil
}
