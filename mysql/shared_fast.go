package mysql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// A request for a shared hold on a key without live holders or waiters
// takes two autocommit statements on MariaDB instead of a transaction.
// The first inserts the hold's row, with the key's version plus one as
// its token, only if the key has no live row of shared holds and is not a
// plain lock. The second advances the key's version to that token, only
// if it has not moved: any grant or place in line since the first
// statement read it moved it. Until then the row counts as a holder for
// every other attempt, which can only make them refuse. When the second
// statement changes nothing, the row goes and the transaction decides.

// errFastOut is the cause of a first holder's take that took nothing:
// the transaction decides.
var errFastOut = errors.New("not a first holder")

// takeFirst is the two-statement take of the first shared hold of a key
// (see above). It returns errFastOut when it took nothing and left
// nothing; any other error with the outcome unknown is a driver.Residue.
func (d *sqlDriver) takeFirst(ctx context.Context, st string, req driver.Request, s driver.Share, label string) (driver.Grant, error) {
	if !d.mariaDB || s.Mode == driver.Permits && s.Weight > s.Limit {
		return driver.Grant{}, errFastOut
	}
	insert, err := d.sharedStmt(ctx, "INSERT INTO "+st+
		" (task_name, owner_token, mode, weight, share_limit, token, queued, kept, owner_label, lock_until, start_time)"+
		" SELECT ?, ?, ?, ?, ?, LAST_INSERT_ID(k.version + 1), 0, 0, ?, "+untilExpr+", "+dbNow+
		" FROM "+d.sql.table+" AS k WHERE k.task_name = ? AND (k.task_status <> 'RUNNING' OR k.lock_until <= "+dbNow+")"+
		" AND NOT EXISTS (SELECT 1 FROM "+st+" AS s WHERE s.task_name = ? AND s.lock_until > "+dbNow+") AND "+beforeFence)
	if err != nil {
		return driver.Grant{}, errFastOut
	}
	advance, err := d.sharedStmt(ctx, "UPDATE "+d.sql.table+" SET version = version + 1, task_status = '"+sharedStatus+"',"+
		" lock_until = GREATEST(IF(task_status = '"+sharedStatus+"', lock_until, "+dbNow+"), "+untilExpr+"), update_time = "+dbNow+
		" WHERE task_name = ? AND version = ? AND (task_status <> 'RUNNING' OR lock_until <= "+dbNow+") AND "+beforeFence)
	if err != nil {
		return driver.Grant{}, errFastOut
	}
	ttl := ttlMicros(req.TTL)
	sent := time.Now()
	f := d.clock.Fence(ctx, sent, req.TTL)
	undo := func(err error) error {
		key, owner := req.Key, req.Owner
		return &driver.Residue{Err: err, Cleanup: func(ctx context.Context) error {
			if err := d.clock.AwaitFence(ctx, f, d.queryNow); err != nil {
				return fmt.Errorf("undo: %w", classify(err))
			}
			return d.dropRow(ctx, st, key, owner)
		}}
	}
	res, err := insert.ExecContext(ctx, req.Key, req.Owner, int(s.Mode), s.Weight, s.Limit, label, ttl, req.Key, req.Key, f.Store)
	if err != nil {
		if definite(err) {
			return driver.Grant{}, errFastOut // rolled back: the transaction tells why
		}
		return driver.Grant{}, undo(fmt.Errorf("shared hold: %w", classify(err)))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err != nil {
			return driver.Grant{}, undo(fmt.Errorf("shared hold: %w", err))
		}
		return driver.Grant{}, errFastOut
	}
	id, err := res.LastInsertId()
	if err != nil || id <= 1 {
		return driver.Grant{}, undo(fmt.Errorf("shared hold: no token returned (LAST_INSERT_ID %d): %v", id, err))
	}
	token := uint64(id)
	res, err = advance.ExecContext(ctx, ttl, req.Key, token-1, f.Store)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	switch {
	case err != nil && !definite(err):
		return driver.Grant{}, undo(fmt.Errorf("shared hold: %w", classify(err)))
	case err != nil || n != 1:
		// Not taken: the row goes, and the transaction decides.
		if derr := d.dropRow(ctx, st, req.Key, req.Owner); derr != nil {
			return driver.Grant{}, undo(fmt.Errorf("shared hold: %w", derr))
		}
		if err != nil && !contended(err) {
			return driver.Grant{}, fmt.Errorf("shared hold: %w", classify(err))
		}
		return driver.Grant{}, errFastOut
	}
	return driver.Grant{Token: token, Validity: req.TTL, Since: sent,
		State: &shareState{key: req.Key, owner: req.Owner, token: token}}, nil
}

// dropRow deletes owner's row of key, whatever it is, by primary key.
func (d *sqlDriver) dropRow(ctx context.Context, st, key, owner string) error {
	del, err := d.sharedStmt(ctx, "DELETE FROM "+st+" WHERE task_name = ? AND owner_token = ?")
	if err == nil {
		_, err = del.ExecContext(ctx, key, owner)
	}
	return classify(err)
}
