package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/golocker/locker/driver"
)

// List implements driver.Lister: the held runs (RUNNING and not expired on
// the database's clock) whose task_name starts with prefix, after the
// cursor (the last task_name of the previous page), in task_name order, at
// most limit of them: one range read of the primary key per page, and one
// read of the holders of each key held by shared holds but for its first
// holder, which the row names. Waiters is 0 for
// plain locks, as for Inspect.
func (d *pgDriver) List(ctx context.Context, prefix, cursor string, limit int) ([]driver.KeyStatus, string, error) {
	limit = max(limit, 1)
	q := "SELECT task_name, version, owner_label, " + micros("start_time") + ", " + micros("lock_until") +
		", owner_token = " + sharedOwnerSQL + ", lock_data, starts_with(owner_token, " + firstPrefixSQL + ") FROM " + quoteIdent(d.cfg.Table) +
		" WHERE task_name > $1 AND starts_with(task_name, $2) AND task_status = 'RUNNING'" +
		" AND (lock_until > " + dbNow + " OR owner_token = " + sharedOwnerSQL + ")" +
		" ORDER BY task_name LIMIT $3"
	var page []driver.KeyStatus
	n, last := 0, ""
	err := d.q.query(ctx, q, []any{cursor, prefix, limit}, func(scan func(...any) error) error {
		var (
			name, label   string
			version       int64
			start, until  sql.NullInt64
			shared, first bool
			data          []byte
		)
		if err := scan(&name, &version, &label, &start, &until, &shared, &data, &first); err != nil {
			return err
		}
		n, last = n+1, name
		if first {
			st, err := firstStatus(label, version, start, until, data)
			page = append(page, driver.KeyStatus{Key: name, Status: st})
			return err
		}
		page = append(page, driver.KeyStatus{Key: name, Status: driver.Status{
			Held: !shared, Label: label, Token: uint64(version), Acquired: utc(start), Expires: utc(until), Data: dataOf(data)}})
		return nil
	})
	if err != nil {
		return nil, "", classify(fmt.Errorf("list: %w", err))
	}
	// Keys held by shared holds: their holders, when any is live.
	kept := page[:0]
	for _, ks := range page {
		if !ks.Held {
			st, err := d.inspectShared(ctx, ks.Key)
			if err != nil {
				return nil, "", fmt.Errorf("list: %w", err)
			}
			if !st.Held {
				continue
			}
			ks.Status = st
		}
		kept = append(kept, ks)
	}
	page = kept
	if n < limit {
		return page, "", nil
	}
	return page, last, nil
}
