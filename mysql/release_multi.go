package mysql

import (
	"context"
	"errors"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

var _ driver.MultiReleaser = (*sqlDriver)(nil)

// releaseChunk is the most leases ReleaseMulti gives up in one statement.
const releaseChunk = 64

// ReleaseMulti releases every lease as Release releases one, and returns
// one result per lease, in order (driver.MultiReleaser). The plain locks
// go in one statement per chunk, all or none. When one of them is not
// held, the statement changes nothing, and each lease is released on its
// own, so that each gets its own outcome. Shared holds and locks taken
// through the line of waiters are released one by one.
func (d *sqlDriver) ReleaseMulti(ctx context.Context, ls []driver.Lease) ([]error, error) {
	errs := make([]error, len(ls))
	var plain []int
	for i, l := range ls {
		if _, ok := l.State.(*shareState); ok || leaseState(l).name != nil {
			errs[i] = d.Release(ctx, l)
			continue
		}
		plain = append(plain, i)
	}
	for len(plain) > 0 {
		n := min(len(plain), releaseChunk)
		d.releaseChunk(ctx, ls, plain[:n], errs)
		plain = plain[n:]
	}
	return errs, nil
}

// releaseChunk releases the plain locks ls[idx...] with one UPDATE,
// padded to a power of two with repeats of the last lease, and sets
// errs[idx...].
func (d *sqlDriver) releaseChunk(ctx context.Context, ls []driver.Lease, idx []int, errs []error) {
	states, distinct := paddedRows(ls, idx)
	args := make([]any, 0, 4*len(states))
	for _, s := range states {
		args = append(args, s.key, s.owner, s.version)
	}
	for _, s := range states {
		args = append(args, s.key)
	}
	released, err := d.releaseRows(ctx, states, len(distinct), args)
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me.Number == errRefused {
		// A lease is not held: nothing changed; each on its own.
		for _, i := range idx {
			errs[i] = d.Release(ctx, ls[i])
		}
		return
	}
	for _, i := range idx {
		// Whatever the outcome, this owner is done with the key.
		d.forget(leaseState(ls[i]))
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("release: %w", err)
		case !released[leaseRow(ls[i])]:
			errs[i] = driver.ErrNotHeld
		}
	}
}

// releaseRows runs the release of the rows states (n of them distinct)
// with args, and returns the rows it released. When fewer rows changed
// than n (a row was missing), it reads which rows are no longer RUNNING
// for their owner and version: a row released and then taken by another
// owner in between is then reported as not held, a false "no" that the
// release did happen.
func (d *sqlDriver) releaseRows(ctx context.Context, states []rowKey, n int, args []any) (map[rowKey]bool, error) {
	stmt, err := d.stmt(ctx, d.releaseN, len(states), d.sql.releaseSQL)
	if err != nil {
		return nil, err
	}
	res, err := stmt.ExecContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	changed, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	if int(changed) == n {
		all := make(map[rowKey]bool, n)
		for _, s := range states {
			all[s] = true
		}
		return all, nil
	}
	return d.rowsWhere(ctx, d.released, d.sql.releasedSQL, states)
}
