package mysql

import (
	"context"
	"fmt"
	"strings"

	"github.com/golocker/locker/driver"
)

// List implements driver.Lister: the held runs (RUNNING and not expired on
// the database's clock) whose task_name starts with prefix, after the
// cursor (the last task_name of the previous page), in task_name order, at
// most limit of them: one range read of the primary key per page. Keys
// marked as held by shared holds (SHARED rows, whose lock_until nobody
// renews) are read as Inspect reads them, in one more query per page, and
// kept when a holder lives; a key's shared hold in its row is read with
// it. Waiters is 0 for plain locks, as for Inspect.
func (d *sqlDriver) List(ctx context.Context, prefix, cursor string, limit int) ([]driver.KeyStatus, string, error) {
	limit = max(limit, 1)
	q := "SELECT task_name, " + runColumns + " FROM " + d.sql.table + " WHERE task_name > ? AND task_name LIKE ? ESCAPE '!' AND (task_status = 'RUNNING' AND lock_until > " + dbNow + " OR task_status = '" + sharedStatus + "'" +
		" OR task_status = '" + soleStatus + "' AND lock_until > " + dbNow + ")" +
		" ORDER BY task_name LIMIT ?"
	like := strings.NewReplacer("!", "!!", "%", "!%", "_", "!_").Replace(prefix) + "%"
	rows, err := d.db.QueryContext(ctx, q, []byte(cursor), []byte(like), limit)
	if err != nil {
		return nil, "", fmt.Errorf("list: %w", err)
	}
	defer rows.Close()
	var page []driver.KeyStatus
	n, last := 0, ""
	for rows.Next() {
		var name []byte
		r, err := scanRunRow(rows, "", &name)
		if err != nil {
			return nil, "", fmt.Errorf("list: %w", err)
		}
		n, last = n+1, string(name)
		switch {
		case r.State == sharedStatus:
			page = append(page, driver.KeyStatus{Key: last}) // read below, once rows is done
		case r.State == soleStatus && r.live:
			page = append(page, driver.KeyStatus{Key: last, Status: r.soleHold()})
		case r.Held:
			page = append(page, driver.KeyStatus{Key: last, Status: r.status()})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list: %w", err)
	}
	rows.Close()
	var marked []string
	for _, ks := range page {
		if !ks.Held {
			marked = append(marked, ks.Key)
		}
	}
	var shared map[string]driver.Status
	if len(marked) > 0 {
		if shared, err = d.inspectSharedKeys(ctx, marked); err != nil {
			return nil, "", fmt.Errorf("list: %w", err)
		}
	}
	held := page[:0]
	for _, ks := range page {
		if !ks.Held {
			ks.Status = shared[ks.Key]
		}
		if ks.Held {
			held = append(held, ks)
		}
	}
	page = held
	if n < limit {
		return page, "", nil
	}
	return page, last, nil
}
