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
// most limit of them: one range read of the primary key per page. Waiters
// is 0, as for Inspect.
func (d *pgDriver) List(ctx context.Context, prefix, cursor string, limit int) ([]driver.KeyStatus, string, error) {
	limit = max(limit, 1)
	q := "SELECT task_name, version, owner_label, " + micros("start_time") + ", " + micros("lock_until") + ", lock_data" +
		" FROM " + quoteIdent(d.cfg.Table) +
		" WHERE task_name > $1 AND starts_with(task_name, $2) AND task_status = 'RUNNING' AND lock_until > " + dbNow +
		" ORDER BY task_name LIMIT $3"
	var page []driver.KeyStatus
	n, last := 0, ""
	err := d.q.query(ctx, q, []any{cursor, prefix, limit}, func(scan func(...any) error) error {
		var (
			name, label  string
			version      int64
			start, until sql.NullInt64
			data         []byte
		)
		if err := scan(&name, &version, &label, &start, &until, &data); err != nil {
			return err
		}
		n, last = n+1, name
		page = append(page, driver.KeyStatus{Key: name, Status: driver.Status{
			Held: true, Label: label, Token: uint64(version), Acquired: utc(start), Expires: utc(until), Data: dataOf(data)}})
		return nil
	})
	if err != nil {
		return nil, "", classify(fmt.Errorf("list: %w", err))
	}
	if n < limit {
		return page, "", nil
	}
	return page, last, nil
}
