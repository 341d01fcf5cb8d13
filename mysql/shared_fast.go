package mysql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// A key marked SHARED keeps the mark when its last hold leaves: the mark is
// a hint that the next hold is likely a shared one too. While the mark
// stays, the key's sequence row in the table of shared holds (owner_token
// seqOwner) carries the latest token handed to a shared hold of the key.
// On MariaDB a request for a shared hold on a marked key without live
// holders or waiters is then one autocommit statement: it reads the key's
// row with a shared lock, so that no transaction frees or takes the key
// meanwhile, and inserts the hold's row and the sequence row advanced to
// the hold's token. The sequence row exists then, so its insert updates it,
// and only when its token is below the new one: a hold granted meanwhile
// fails the statement, which then changes nothing. Otherwise the
// transaction decides.

// seqOwner is the owner_token of a key's sequence row, which no holder or
// waiter has.
const seqOwner = ""

// seqUntil is the lock_until of a sequence row: long past, so that no
// reader of live holds counts it.
const seqUntil = "'1970-01-01 00:00:01'"

// errFastOut is the cause of a hold's one-statement take that took
// nothing: the transaction decides.
var errFastOut = errors.New("not a first holder of a marked key")

// takeMarked is the one-statement take of the first shared hold of a key
// marked SHARED (see above). It returns errFastOut when it took nothing and
// left nothing; any other error with the outcome unknown is a
// driver.Residue.
func (d *sqlDriver) takeMarked(ctx context.Context, st string, req driver.Request, s driver.Share, label string) (driver.Grant, error) {
	if !d.mariaDB || s.Mode == driver.Permits && s.Weight > s.Limit {
		return driver.Grant{}, errFastOut
	}
	take, err := d.sharedStmt(ctx, takeMarkedSQL(d.sql.table, st, txIdle(req.TTL)))
	if err != nil {
		return driver.Grant{}, errFastOut
	}
	sent := time.Now()
	f := d.clock.Fence(ctx, sent, req.TTL)
	res, err := take.ExecContext(ctx, int(s.Mode), s.Weight, s.Limit, label, ttlMicros(req.TTL), req.Owner, req.Key, f.Store)
	if err != nil {
		if definite(err) {
			return driver.Grant{}, errFastOut // rolled back: the transaction tells why
		}
		return driver.Grant{}, d.undoTake(req, f, st, fmt.Errorf("shared hold: %w", classify(err)))
	}
	// The hold's row inserted (1) and the sequence row updated (2).
	if n, err := res.RowsAffected(); err != nil || n != 3 {
		if err != nil || n != 0 {
			return driver.Grant{}, d.undoTake(req, f, st, fmt.Errorf("shared hold: %d rows affected: %v", n, err))
		}
		return driver.Grant{}, errFastOut
	}
	id, err := res.LastInsertId()
	if err != nil || id <= 1 {
		return driver.Grant{}, d.undoTake(req, f, st, fmt.Errorf("shared hold: no token returned (LAST_INSERT_ID %d): %v", id, err))
	}
	token := uint64(id)
	return driver.Grant{Token: token, Validity: req.TTL, Since: sent,
		State: &shareState{key: req.Key, owner: req.Owner, token: token}}, nil
}

// takeMarkedSQL is the statement of takeMarked on lock table t (quoted)
// and its table of shared holds st, whose wait for the key's row lasts
// idle seconds at most. Args: mode, weight, limit, label, ttl µs, owner,
// key, fence µs.
func takeMarkedSQL(t, st string, idle int64) string {
	// SET STATEMENT bounds the wait for the key's row, as inTx does.
	return fmt.Sprintf("SET STATEMENT innodb_lock_wait_timeout = %d FOR", idle) +
		" INSERT INTO " + st + " (task_name, owner_token, mode, weight, share_limit, token, queued, kept, owner_label, lock_until, start_time)" +
		" SELECT q.task_name, o.owner, IF(o.owner = '', 0, ?), IF(o.owner = '', 0, ?), IF(o.owner = '', 0, ?)," +
		" LAST_INSERT_ID(GREATEST(k.version, q.token) + 1), 0, 0, IF(o.owner = '', '', ?)," +
		" IF(o.owner = '', " + seqUntil + ", " + untilExpr + "), " + dbNow +
		" FROM " + t + " AS k JOIN " + st + " AS q ON q.task_name = k.task_name AND q.owner_token = ''" +
		" JOIN (SELECT CAST('' AS BINARY) AS owner UNION ALL SELECT ?) AS o" +
		" WHERE k.task_name = ? AND k.task_status = '" + sharedStatus + "'" +
		" AND NOT EXISTS (SELECT 1 FROM " + st + " AS h WHERE h.task_name = k.task_name AND h.owner_token <> ''" +
		" AND h.lock_until > " + dbNow + " LOCK IN SHARE MODE)" +
		" AND " + beforeFence + " LOCK IN SHARE MODE" +
		" ON DUPLICATE KEY UPDATE " + st + ".token = IF(" + st + ".owner_token = '' AND " + st + ".token < VALUES(token), VALUES(token), ~0 + (" + st + ".token | 1))"
}

// undoTake is err as a driver.Residue that deletes the hold's row a
// one-statement take may have left, once its fence f has passed.
func (d *sqlDriver) undoTake(req driver.Request, f driver.Fence, st string, err error) error {
	key, owner := req.Key, req.Owner
	return &driver.Residue{Err: err, Cleanup: func(ctx context.Context) error {
		if err := d.clock.AwaitFence(ctx, f, d.queryNow); err != nil {
			return fmt.Errorf("undo: %w", classify(err))
		}
		return d.dropRow(ctx, st, key, owner)
	}}
}

// dropRow deletes owner's row of key, whatever it is, by primary key.
func (d *sqlDriver) dropRow(ctx context.Context, st, key, owner string) error {
	del, err := d.sharedStmt(ctx, "DELETE FROM "+st+" WHERE task_name = ? AND owner_token = ?")
	if err == nil {
		_, err = del.ExecContext(ctx, key, owner)
	}
	return classify(err)
}
