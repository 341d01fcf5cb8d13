package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

// Shared holds (semaphore permits, read and write holds) live in a second
// table, the lock table's name plus sharedSuffix, one row per holder or
// waiter. The key's row in the lock table stays the key's mutex and token
// sequence: every attempt is one transaction that locks it first (SELECT …
// FOR UPDATE), so attempts on one key run one at a time, and every grant
// advances its version, so tokens increase across plain locks and shared
// holds. While a key has shared holders or waiters its row is SHARED, with
// a lock_until no earlier than any of theirs: a plain acquisition treats it
// as held.

// sharedSuffix names the table of shared holds after the lock table's.
const sharedSuffix = "_shared"

// sharedStatus is the task_status of a key held by shared holds.
const sharedStatus = "SHARED"

// maxAttempts is how many times a transaction on shared holds runs
// before a deadlock is reported.
const maxAttempts = 5

// shareTxOptions returns the options of the transactions on shared holds:
// READ COMMITTED takes no gap locks, so that transactions on neighbouring
// keys do not block each other; the key's row, locked first, orders those
// on one key.
func shareTxOptions() *sql.TxOptions {
	return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
}

// SharedTableSQL returns the DDL of the table of shared holds of lock table
// table, which New creates unless Config.SkipMigration is set.
func SharedTableSQL(table string) string { return sharedTableSQL(table) }

func sharedTableSQL(table string) string {
	return "CREATE TABLE IF NOT EXISTS `" + table + sharedSuffix + "` (\n" +
		"  `task_name`   VARBINARY(255)   NOT NULL COMMENT 'lock key, as in the lock table',\n" +
		"  `owner_token` VARBINARY(64)    NOT NULL COMMENT 'random token of the holder or waiter',\n" +
		"  `mode`        TINYINT UNSIGNED NOT NULL COMMENT '1 permits, 2 read, 3 write',\n" +
		"  `weight`      INT UNSIGNED     NOT NULL COMMENT 'permits taken, or 1',\n" +
		"  `share_limit` INT UNSIGNED     NOT NULL COMMENT 'the semaphore''s permits, 0 for a read-write lock',\n" +
		"  `token`       BIGINT UNSIGNED  NOT NULL COMMENT 'fencing token of a holder, 0 for a waiter',\n" +
		"  `queued`      BIGINT UNSIGNED  NOT NULL COMMENT 'place in line of a waiter, 0 for a holder',\n" +
		"  `kept`        TINYINT UNSIGNED NOT NULL COMMENT '1 when given up with a MinHold left',\n" +
		"  `owner_label` VARCHAR(255)     NOT NULL COMMENT 'human-readable holder, e.g. host:pid',\n" +
		"  `lock_until`  DATETIME(6)      NOT NULL COMMENT 'UTC; the hold or the place in line ends then unless renewed',\n" +
		"  `start_time`  DATETIME(6)      NOT NULL COMMENT 'UTC; the grant or the arrival in line',\n" +
		"  PRIMARY KEY (`task_name`, `owner_token`)\n" +
		") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='github.com/golocker/locker/mysql shared holds'"
}

// migrateShared creates the table of shared holds unless it exists; a lock
// table whose name leaves no room for the suffix has none.
func migrateShared(ctx context.Context, db *sql.DB, table string) error {
	if len(table)+len(sharedSuffix) > maxTableName {
		return nil
	}
	if _, err := db.ExecContext(ctx, sharedTableSQL(table)); err != nil {
		return fmt.Errorf("create table %s%s: %w", table, sharedSuffix, err)
	}
	return nil
}

// shareState is the driver's state of a shared hold.
type shareState struct {
	key, owner string
	token      uint64
}

// sharedTable returns the quoted name of the table of shared holds, or an
// error when the lock table's name leaves no room for it.
func (d *sqlDriver) sharedTable() (string, error) {
	if len(d.cfg.Table)+len(sharedSuffix) > maxTableName {
		return "", driver.Permanent(fmt.Errorf("Config.Table %q leaves no room for the suffix %q of the table of shared holds: use a name of at most %d bytes",
			d.cfg.Table, sharedSuffix, maxTableName-len(sharedSuffix)))
	}
	return "`" + d.cfg.Table + sharedSuffix + "`", nil
}

// shareRow is one live row of the table of shared holds.
type shareRow struct {
	owner     string
	mode      driver.Mode
	weight    int
	limit     int
	queued    uint64
	remaining time.Duration
}

// TryAcquireShared implements driver.Sharer. Each attempt is one
// transaction (run again after a deadlock) that locks the key's row, drops
// the expired holders and waiters, checks the kind and limit, and grants
// the hold or records the waiter. Waiters poll, with the Locker's backoff.
func (d *sqlDriver) TryAcquireShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
	if len(req.Owner) > maxOwnerBytes {
		return driver.Grant{}, driver.Permanent(fmt.Errorf("owner token of %d bytes exceeds owner_token's %d", len(req.Owner), maxOwnerBytes))
	}
	st, err := d.sharedTable()
	if err != nil {
		return driver.Grant{}, err
	}
	label := d.label
	if req.Label != "" && req.Label != label {
		label = cleanLabel(req.Label)
	}
	for range maxAttempts {
		sent := time.Now()
		f := d.clock.Fence(ctx, sent, req.TTL)
		g, err := d.shareAttempt(ctx, st, req, s, label, f)
		if err == nil {
			g.Since = sent
			return g, nil
		}
		if contended(err) {
			continue // rolled back by a deadlock: certainly nothing done
		}
		var me *gomysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 {
			return driver.Grant{}, driver.Permanent(fmt.Errorf("shared hold: table %s is missing: create it with mysql.SharedTableSQL: %w", st, err))
		}
		if errors.Is(err, driver.ErrHeld) || errors.Is(err, driver.ErrConflict) {
			return driver.Grant{}, err
		}
		err = fmt.Errorf("shared hold: %w", classify(err))
		if !definite(err) {
			key, owner := req.Key, req.Owner
			err = &driver.Residue{Err: err, Cleanup: func(ctx context.Context) error {
				if err := d.clock.AwaitFence(ctx, f, d.queryNow); err != nil {
					return fmt.Errorf("undo: %w", classify(err))
				}
				return d.dropShare(ctx, key, owner, 0, false)
			}}
		}
		return driver.Grant{}, err
	}
	return driver.Grant{}, driver.Held(0)
}

// shareAttempt is one transaction of TryAcquireShared.
func (d *sqlDriver) shareAttempt(ctx context.Context, st string, req driver.Request, s driver.Share, label string, f driver.Fence) (g driver.Grant, err error) {
	t := d.sql.table
	tx, err := d.db.BeginTx(ctx, shareTxOptions())
	if err != nil {
		return driver.Grant{}, err
	}
	defer func() {
		if err != nil || g.Token == 0 {
			_ = tx.Rollback()
		}
	}()
	var (
		status  string
		version uint64
		live    bool
	)
	lock := func() error {
		return d.txQueryRow(ctx, tx, "SELECT task_status, version, lock_until > "+dbNow+" FROM "+t+
			" WHERE task_name = ? FOR UPDATE", req.Key).Scan(&status, &version, &live)
	}
	err = lock()
	if errors.Is(err, sql.ErrNoRows) {
		// The key's row, free, when it is missing. The INSERT comes
		// second: on an existing row it would take a shared lock, which
		// two attempts would both upgrade, a deadlock.
		if _, err := d.txExec(ctx, tx, "INSERT IGNORE INTO "+t+
			" (task_name, task_status, version, owner_token, owner_label, lock_until, update_time)"+
			" VALUES (?, 'FINISH', "+epochMicros+", '', '', "+dbNow+", "+dbNow+")", req.Key); err != nil {
			return driver.Grant{}, err
		}
		err = lock()
	}
	if err != nil {
		return driver.Grant{}, err
	}
	if status == string(Running) && live {
		return driver.Grant{}, fmt.Errorf("%w: the key is a plain lock, not %s", driver.ErrConflict, shareKindOf(s.Mode, s.Limit))
	}
	all, err := d.shareRows(ctx, tx, st, req.Key)
	if err != nil {
		return driver.Grant{}, err
	}
	rows := slices.DeleteFunc(slices.Clone(all), func(r shareRow) bool { return r.remaining <= 0 })
	if len(rows) < len(all) {
		// Expired holders and waiters (crashed) go.
		if _, err := d.txExec(ctx, tx, "DELETE FROM "+st+" WHERE task_name = ? AND lock_until <= "+dbNow, req.Key); err != nil {
			return driver.Grant{}, err
		}
	}
	var (
		used, holders int
		write         bool
		me            *shareRow
		next          time.Duration // until the first holder's claim ends
	)
	for i := range rows {
		r := &rows[i]
		if (r.mode == driver.Permits) != (s.Mode == driver.Permits) || r.limit != s.Limit {
			return driver.Grant{}, fmt.Errorf("%w: the key is %s, not %s", driver.ErrConflict, shareKindOf(r.mode, r.limit), shareKindOf(s.Mode, s.Limit))
		}
		if r.owner == req.Owner && r.queued > 0 {
			me = r
		}
		if r.queued == 0 {
			holders++
			used += r.weight
			write = write || r.mode == driver.Write
			if next == 0 || r.remaining < next {
				next = r.remaining
			}
		}
	}
	fits := !write && (s.Mode != driver.Write || holders == 0) && (s.Mode != driver.Permits || used+s.Weight <= s.Limit)
	for _, r := range rows {
		// Behind every earlier waiter (all of them when not in line):
		// readers only behind writers.
		if r.queued > 0 && (me == nil || r.queued < me.queued) && (s.Mode != driver.Read || r.mode == driver.Write) {
			fits = false
		}
	}
	ttl := ttlMicros(req.TTL)
	if !fits && (!s.Queue || me != nil) {
		if me != nil {
			// Still in line: the place lasts another TTL.
			if _, err := d.txExec(ctx, tx, "UPDATE "+st+" SET lock_until = "+untilExpr+" WHERE task_name = ? AND owner_token = ?",
				ttl, req.Key, req.Owner); err != nil {
				return driver.Grant{}, err
			}
			if err := d.coverShare(ctx, tx, req.Key, ttl, f, false); err != nil {
				return driver.Grant{}, err
			}
		}
		if err := tx.Commit(); err != nil {
			return driver.Grant{}, err
		}
		if !s.Queue {
			return driver.Grant{}, driver.Held(next)
		}
		return driver.Grant{}, d.queued(req, next)
	}
	// A grant, or a new place in line: both take the next version.
	if err := d.coverShare(ctx, tx, req.Key, ttl, f, true); err != nil {
		return driver.Grant{}, err
	}
	token, queued := version+1, uint64(0)
	if !fits {
		token, queued = 0, version+1
	}
	if _, err := d.txExec(ctx, tx, "REPLACE INTO "+st+
		" (task_name, owner_token, mode, weight, share_limit, token, queued, kept, owner_label, lock_until, start_time)"+
		" VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, "+untilExpr+", "+dbNow+")",
		req.Key, req.Owner, int(s.Mode), s.Weight, s.Limit, token, queued, label, ttl); err != nil {
		return driver.Grant{}, err
	}
	if err := tx.Commit(); err != nil {
		return driver.Grant{}, err
	}
	if !fits {
		return driver.Grant{}, d.queued(req, next)
	}
	return driver.Grant{Token: token, Validity: req.TTL,
		State: &shareState{key: req.Key, owner: req.Owner, token: token}}, nil
}

// queued is the refusal of a request recorded in line: back before the
// record expires, and a Residue that withdraws it.
func (d *sqlDriver) queued(req driver.Request, next time.Duration) error {
	if r := req.TTL / 3; next <= 0 || next > r {
		next = r
	}
	key, owner := req.Key, req.Owner
	return &driver.Residue{Err: driver.Held(next), Cleanup: func(ctx context.Context) error {
		return d.dropShare(ctx, key, owner, 0, true)
	}}
}

// coverShare marks the key's row SHARED with a lock_until no earlier than
// ttl µs from now, so that plain acquisitions wait; with advance it also
// advances the version. It fails with a Held error once the fence passed.
func (d *sqlDriver) coverShare(ctx context.Context, tx *sql.Tx, key string, ttl int64, f driver.Fence, advance bool) error {
	set := ""
	if advance {
		set = "version = version + 1, "
	}
	res, err := d.txExec(ctx, tx, "UPDATE "+d.sql.table+" SET "+set+"task_status = '"+sharedStatus+"',"+
		" lock_until = GREATEST(IF(task_status = '"+sharedStatus+"', lock_until, "+dbNow+"), "+untilExpr+"), update_time = "+dbNow+
		" WHERE task_name = ? AND "+beforeFence, ttl, key, f.Store)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err != nil {
			return err
		}
		return driver.Held(0) // the fence passed: take nothing
	}
	return nil
}

// shareRows reads the key's holders and waiters, expired ones included
// (remaining not above 0), holders first, then waiters in line order.
func (d *sqlDriver) shareRows(ctx context.Context, tx *sql.Tx, st, key string) ([]shareRow, error) {
	rs, err := d.txQuery(ctx, tx, "SELECT owner_token, mode, weight, share_limit, queued,"+
		" TIMESTAMPDIFF(MICROSECOND, "+dbNow+", lock_until) FROM "+st+
		" WHERE task_name = ? ORDER BY queued", key)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var rows []shareRow
	for rs.Next() {
		var r shareRow
		var owner []byte
		var mode uint8
		var rem int64
		if err := rs.Scan(&owner, &mode, &r.weight, &r.limit, &r.queued, &rem); err != nil {
			return nil, err
		}
		r.owner, r.mode, r.remaining = string(owner), driver.Mode(mode), time.Duration(rem)*time.Microsecond
		rows = append(rows, r)
	}
	return rows, rs.Err()
}

// dropShare deletes owner's live row of key (its hold when token is not 0,
// else its hold or place in line; its place in line only with waiter) and
// settles the key's row. It returns driver.ErrNotHeld when there was none.
func (d *sqlDriver) dropShare(ctx context.Context, key, owner string, token uint64, waiter bool) error {
	cond := "owner_token = ?"
	args := []any{key, owner}
	switch {
	case token != 0:
		cond += " AND token = ? AND queued = 0"
		args = append(args, token)
	case waiter:
		cond += " AND queued > 0"
	}
	return d.inShareTx(ctx, key, func(tx *sql.Tx, st string) (int64, error) {
		res, err := d.txExec(ctx, tx, "DELETE FROM "+st+" WHERE task_name = ? AND "+cond+" AND lock_until > "+dbNow, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// inShareTx runs change in a transaction that holds the key's row, then
// settles the row: SHARED until the last live row of the table of shared
// holds ends, FINISH when there is none. It returns driver.ErrNotHeld
// when change affected no row.
func (d *sqlDriver) inShareTx(ctx context.Context, key string, change func(*sql.Tx, string) (int64, error)) (err error) {
	st, err := d.sharedTable()
	if err != nil {
		return err
	}
	for range maxAttempts {
		var n int64
		n, err = d.shareTx(ctx, key, st, change)
		if contended(err) {
			continue
		}
		if err != nil {
			return classify(err)
		}
		if n == 0 {
			return driver.ErrNotHeld
		}
		return nil
	}
	return err
}

func (d *sqlDriver) shareTx(ctx context.Context, key, st string, change func(*sql.Tx, string) (int64, error)) (int64, error) {
	t := d.sql.table
	tx, err := d.db.BeginTx(ctx, shareTxOptions())
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	var status string
	err = d.txQueryRow(ctx, tx, "SELECT task_status FROM "+t+" WHERE task_name = ? FOR UPDATE", key).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) || err == nil && status != sharedStatus {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := change(tx, st)
	if err != nil || n == 0 {
		return n, err
	}
	if _, err := d.txExec(ctx, tx, "UPDATE "+t+" SET"+
		" task_status = IF(EXISTS (SELECT 1 FROM "+st+" WHERE task_name = ? AND lock_until > "+dbNow+"), '"+sharedStatus+"', 'FINISH'),"+
		" lock_until = GREATEST("+dbNow+", COALESCE((SELECT MAX(lock_until) FROM "+st+" WHERE task_name = ?), "+dbNow+")),"+
		" finish_time = IF(task_status = 'FINISH', "+dbNow+", finish_time), update_time = "+dbNow+
		" WHERE task_name = ?", key, key, key); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// SetLimit implements driver.Limiter: one transaction that locks the key's
// row, as attempts do, and sets the limit of every live holder and waiter.
// Waiters poll, so they see it at their next attempt.
func (d *sqlDriver) SetLimit(ctx context.Context, key string, limit int) error {
	st, err := d.sharedTable()
	if err != nil {
		return err
	}
	for range maxAttempts {
		err = d.setLimit(ctx, st, key, limit)
		if !contended(err) {
			break
		}
	}
	if err != nil && !errors.Is(err, driver.ErrConflict) {
		return fmt.Errorf("setlimit: %w", classify(err))
	}
	return err
}

// setLimit is one transaction of SetLimit.
func (d *sqlDriver) setLimit(ctx context.Context, st, key string, limit int) (err error) {
	tx, err := d.db.BeginTx(ctx, shareTxOptions())
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var (
		status string
		live   bool
	)
	err = d.txQueryRow(ctx, tx, "SELECT task_status, lock_until > "+dbNow+" FROM "+d.sql.table+
		" WHERE task_name = ? FOR UPDATE", key).Scan(&status, &live)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return tx.Rollback() // a free key keeps no limit
	case err != nil:
		return err
	case status == string(Running) && live:
		return fmt.Errorf("%w: the key is a plain lock, not a semaphore", driver.ErrConflict)
	}
	rows, err := d.shareRows(ctx, tx, st, key)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.remaining > 0 && r.mode != driver.Permits {
			return fmt.Errorf("%w: the key is a read-write lock, not a semaphore", driver.ErrConflict)
		}
	}
	if _, err := d.txExec(ctx, tx, "UPDATE "+st+" SET share_limit = ? WHERE task_name = ?", limit, key); err != nil {
		return err
	}
	return tx.Commit()
}
