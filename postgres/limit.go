package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/golocker/locker/driver"
)

// The limit of a semaphore lives in share_limit, on every row of its
// holders and waiters: each attempt compares its own limit with theirs. A
// key with no row keeps no limit.

// setLimitSQL sets the limit of every row of a key in the table of shared
// holds st and notifies the key's waiters. Args: key, limit, channel.
func setLimitSQL(st string) string {
	return "WITH u AS (UPDATE " + st + " SET share_limit = $2 WHERE task_name = $1)" +
		" SELECT pg_notify($3, $1)::text"
}

// SetLimit implements driver.Limiter: one statement that sets a first
// holder's limit in its key's row (first.go), or else one transaction that
// locks the key's row, as attempts do, and sets the limit of every holder
// and waiter. The waiters wake on its notification, or poll.
func (d *pgDriver) SetLimit(ctx context.Context, key string, limit int) error {
	if err := d.checkShared(); err != nil {
		return err
	}
	var err error
	for try := 0; ; try++ {
		var first bool
		if first, err = d.setFirstLimit(ctx, key, limit); first || err != nil {
			break
		}
		err = d.inTx(ctx, func(tx runner) error { return d.setLimit(ctx, tx, key, limit) })
		if !retryable(err) && !errors.Is(err, errKeyMissing) || try >= shareAttempts {
			break
		}
	}
	if errors.Is(err, errKeyMissing) {
		err = errors.New("the key's first holder kept changing")
	}
	if err != nil && !errors.Is(err, driver.ErrConflict) {
		return classify(fmt.Errorf("setlimit: %w", err))
	}
	return err
}

// setLimit is SetLimit's transaction.
func (d *pgDriver) setLimit(ctx context.Context, tx runner, key string, limit int) error {
	var k keyRow
	found := false
	err := tx.query(ctx, d.shared.lockTx, []any{key}, func(scan func(...any) error) error {
		found = true
		return scan(&k.status, &k.version, &k.owner, &k.live)
	})
	if err == nil && !found {
		// No row, or a first holder's, which took the row since
		// setFirstLimit looked: its renewal writes the row, so the row
		// stays unlocked, and SetLimit looks again.
		err = tx.query(ctx, d.shared.isFirst, []any{key}, func(scan func(...any) error) error {
			if err := scan(&found); err != nil {
				return err
			}
			if found {
				return errKeyMissing
			}
			return nil
		})
	}
	switch {
	case err != nil:
		return err
	case !found:
		return nil // a free key keeps no limit
	case k.plain():
		return fmt.Errorf("%w: the key is a plain lock, not a semaphore", driver.ErrConflict)
	case !k.shared():
		return nil
	}
	rows, err := d.shareRows(ctx, tx, key)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.remaining > 0 && r.mode != driver.Permits {
			return fmt.Errorf("%w: the key is a read-write lock, not a semaphore", driver.ErrConflict)
		}
	}
	return tx.query(ctx, d.shared.setLimit, []any{key, limit, d.cfg.Table}, func(func(...any) error) error { return nil })
}
