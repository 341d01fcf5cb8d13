package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

// A key's first shared hold lives in the key's row (see shared_fast.go).
// Other shared holds (semaphore permits, read and write holds) live in a
// second table, the lock table's name plus sharedSuffix, one row per
// holder or waiter. The key's row in the lock table stays the key's mutex:
// every attempt but the one-statement take of shared_fast.go is one
// transaction that locks it first (lockKey), so attempts on one key run
// one at a time. Tokens come from the key's version: every grant takes the
// next one and writes it back, so tokens increase across plain locks and
// shared holds. While a key has shared holders or
// waiters its row is SHARED, which a plain acquisition never takes.
// Renewals, releases and withdrawals touch only their own row of the table
// of shared holds, by primary key: none of them waits for the key's row,
// which an attempt cut off from its client holds until the server ends its
// session (txIdle). The last hold to leave leaves the mark; the next plain
// acquisition frees the key's row once every hold ended (settle), as it
// does after a crash, and so does Purge. The transaction of the next first
// holder puts it in the key's row once no hold or waiter is live.

// sharedSuffix names the table of shared holds after the lock table's.
const sharedSuffix = "_shared"

// sharedStatus is the task_status of a key held by shared holds.
const sharedStatus = "SHARED"

// maxAttempts is how many times a transaction on shared holds runs
// before a deadlock is reported.
const maxAttempts = 5

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
	// inRow is set on a hold taken in its key's row; moved once the hold
	// was found moved out of it (or gone).
	inRow bool
	moved atomic.Bool
}

// shareID identifies a shared hold: key, owner and token.
type shareID struct {
	key, owner string
	token      uint64
}

func (s *shareState) id() shareID { return shareID{key: s.key, owner: s.owner, token: s.token} }

// rowHeld reports whether the hold was taken in its key's row and is not
// known to have left it.
func (s *shareState) rowHeld() bool { return s.inRow && !s.moved.Load() }

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

// TryAcquireShared implements driver.Sharer. The first hold of a key
// takes one statement, in the key's row (see takeRow). Otherwise each
// attempt is one transaction (run again after a deadlock) that locks the
// key's row, drops the expired holders and waiters, checks the kind and
// limit, and grants the hold or records the waiter; a hold in the key's
// row moves out first. A grant has the holder goroutine take the key's
// named lock, and a refusal lets the waiter subscribe to it (wake.go).
func (d *sqlDriver) TryAcquireShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
	g, err := d.tryAcquireShared(ctx, req, s)
	switch {
	case d.notify == nil:
	case err == nil:
		d.notify.acquiredShared(req.Key, req.Owner, s.Queue && d.notify.marked(d.notify.shared, req.Key))
		d.unlined(req.Key, req.Owner)
	case s.Queue && errors.Is(err, driver.ErrHeld):
		d.sharedRefused(req.Key, req.Owner)
	}
	return g, err
}

func (d *sqlDriver) tryAcquireShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
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
	// A key a waiter of this driver was refused lately is held by shared
	// holds, whose row takeRow cannot take.
	if !s.Queue || d.notify == nil || !d.notify.marked(d.notify.shared, req.Key) {
		if g, err := d.takeRow(ctx, st, req, s, label); !errors.Is(err, errFastOut) {
			return g, err
		}
	}
	for range maxAttempts {
		sent := time.Now()
		f := d.clock.Fence(ctx, sent, req.TTL) // moved up to the fenced statement
		g, err := d.shareAttempt(ctx, st, req, s, label, &f)
		if err == nil {
			g.Since = sent
			return g, nil
		}
		if contended(err) || errors.Is(err, errRenewed) || errors.Is(err, errFenced) && ctx.Err() == nil {
			continue // rolled back: certainly nothing done
		}
		if errors.Is(err, errSole) {
			if err := d.moveSole(ctx, st, req.Key); err != nil && !contended(err) {
				return driver.Grant{}, fmt.Errorf("shared hold: move the key's first hold: %w", classify(err))
			}
			continue
		}
		if errors.Is(err, errFenced) {
			break
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
				return d.undoShare(ctx, key, owner)
			}}
		}
		return driver.Grant{}, err
	}
	return driver.Grant{}, driver.Held(0)
}

// errRenewed is the error of an attempt rolled back because a hold it
// counted as expired was renewed meanwhile.
var errRenewed = errors.New("a hold counted as expired was renewed")

// errFenced is the error of an attempt whose fenced statement arrived
// after its fence, and changed nothing.
var errFenced = errors.New("the statement arrived after its fence")

// shareAttempt is one transaction of TryAcquireShared. Its statement on
// the key's row carries a fence, which it sets f to just before it sends
// it.
func (d *sqlDriver) shareAttempt(ctx context.Context, st string, req driver.Request, s driver.Share, label string, f *driver.Fence) (g driver.Grant, err error) {
	var refusal error // a refusal to report once the transaction committed
	err = d.inTx(ctx, txIdle(req.TTL), func(tx *sql.Tx) error {
		last, status, err := d.lockKey(ctx, tx, req.Key)
		if err != nil {
			return err
		}
		if status == string(Running) {
			return fmt.Errorf("%w: the key is a plain lock, not %s", driver.ErrConflict, shareKindOf(s.Mode, s.Limit))
		}
		all, err := d.shareRows(ctx, tx, st, req.Key)
		if err != nil {
			return err
		}
		var expired []any
		for _, r := range all {
			if r.remaining <= 0 && r.owner != req.Owner {
				expired = append(expired, r.owner)
			}
		}
		rows := slices.DeleteFunc(all, func(r shareRow) bool { return r.remaining <= 0 })
		if len(expired) > 0 {
			// Expired holders and waiters (crashed) go: exactly those
			// counted, or the decision below does not stand (a renewal
			// on the way when the rows were read got there first).
			n, err := d.dropExpired(ctx, tx, st, req.Key, expired)
			if err != nil {
				return err
			}
			if n != len(expired) {
				return errRenewed
			}
		}
		fits, me, next, err := admit(rows, req.Owner, s)
		if err != nil {
			return err
		}
		ttl := ttlMicros(req.TTL)
		*f = d.clock.Fence(ctx, time.Now(), req.TTL)
		if !fits && (!s.Queue || me != nil) {
			if me != nil {
				// Still in line: the place lasts another TTL.
				if _, err := d.txExec(ctx, tx, "UPDATE "+st+" SET lock_until = "+untilExpr+" WHERE task_name = ? AND owner_token = ?",
					ttl, req.Key, req.Owner); err != nil {
					return err
				}
				if err := d.coverShare(ctx, tx, req.Key, ttl, *f, 0); err != nil {
					return err
				}
				refusal = d.queued(req, next)
			} else {
				refusal = driver.Held(next)
			}
			return nil
		}
		// A grant, or a new place in line: both take the next token,
		// which the key's version records (coverShare).
		tok := last + 1
		if fits && len(rows) == 0 {
			// The key's first hold: in the key's row, as takeRow takes
			// it, whose version records the token.
			if err := d.fencedExec(ctx, tx, soleGrantSQL(d.sql.table), tok, req.Owner, label, soleKind(s), ttl, req.Key, f.Store); err != nil {
				return err
			}
			g = driver.Grant{Token: tok, Validity: req.TTL,
				State: &shareState{key: req.Key, owner: req.Owner, token: tok, inRow: true}}
			return nil
		}
		if err := d.coverShare(ctx, tx, req.Key, ttl, *f, tok); err != nil {
			return err
		}
		token, queued := tok, uint64(0)
		if !fits {
			token, queued = 0, tok
		}
		if _, err := d.txExec(ctx, tx, "REPLACE INTO "+st+
			" (task_name, owner_token, mode, weight, share_limit, token, queued, kept, owner_label, lock_until, start_time)"+
			" VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, "+untilExpr+", "+dbNow+")",
			req.Key, req.Owner, int(s.Mode), s.Weight, s.Limit, token, queued, label, ttl); err != nil {
			return err
		}
		if !fits {
			refusal = d.queued(req, next)
			return nil
		}
		g = driver.Grant{Token: token, Validity: req.TTL,
			State: &shareState{key: req.Key, owner: req.Owner, token: token}}
		return nil
	})
	if err != nil {
		return driver.Grant{}, err
	}
	if refusal != nil {
		return driver.Grant{}, refusal
	}
	return g, nil
}

// lockKey reads and row-locks, in tx, the key's row, inserting it free
// when it is missing. It returns the latest token of the key (its version)
// and the key's status. A plain lock or a hold in the row that expired counts as
// FINISH. It fails with errSole, holding no lock, when a live shared hold
// lives in the key's row: that hold's renewals must never wait for a
// transaction.
func (d *sqlDriver) lockKey(ctx context.Context, tx *sql.Tx, key string) (last uint64, status string, err error) {
	for range maxAttempts {
		// At READ COMMITTED an UPDATE keeps no lock on a row it does not
		// change (a SELECT … FOR UPDATE keeps it): a row held in place
		// stays unlocked. update_time changes, so that a changed row
		// counts. The statement reports the version and the status
		// through LAST_INSERT_ID (see keyState), which saves a read.
		res, err := d.txExec(ctx, tx, "UPDATE "+d.sql.table+" SET update_time = "+dbNow+", version = version + 0 * LAST_INSERT_ID("+keyStateExpr+")"+
			" WHERE task_name = ? AND NOT (task_status = '"+soleStatus+"' AND lock_until > "+dbNow+")", key)
		if err != nil {
			return 0, "", err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			if err != nil {
				return 0, "", err
			}
			id, err := res.LastInsertId()
			if err != nil {
				return 0, "", err
			}
			last, status = keyState(uint64(id))
			return last, status, nil
		}
		var held bool
		switch err := d.txQueryRow(ctx, tx, "SELECT task_status, lock_until > "+dbNow+" FROM "+d.sql.table+
			" WHERE task_name = ?", key).Scan(&status, &held); {
		case errors.Is(err, sql.ErrNoRows):
			// The key's row, free, when it is missing, in a statement of
			// its own: on a row created meanwhile the INSERT takes a
			// shared lock, which the UPDATE above would upgrade while a
			// release or a move waits for the row, a deadlock.
			ins, err := d.sharedStmt(ctx, "INSERT IGNORE INTO "+d.sql.table+
				" (task_name, task_status, version, owner_token, owner_label, lock_until, update_time)"+
				" VALUES (?, 'FINISH', "+epochMicros+", '', '', "+dbNow+", "+dbNow+")")
			if err == nil {
				_, err = ins.ExecContext(ctx, key)
			}
			if err != nil {
				return 0, "", err
			}
		case err != nil:
			return 0, "", err
		case status == soleStatus && held:
			return 0, "", errSole
		}
	}
	return 0, "", errRenewed // the row kept changing: run the transaction again
}

// keyStateExpr encodes, for lockKey, a key's version and status in one
// number: version × 4, plus 1 for a live plain lock, 2 for a key marked
// SHARED. Versions stay far below 2^62 (microseconds since 1970 plus one
// per grant).
const keyStateExpr = "version * 4 + IF(task_status = '" + string(Running) + "' AND lock_until > " + dbNow + ", 1," +
	" IF(task_status = '" + sharedStatus + "', 2, 0))"

// keyState decodes keyStateExpr: the version, and the status, where a
// plain lock or a hold in the row that expired counts as FINISH.
func keyState(v uint64) (version uint64, status string) {
	switch v % 4 {
	case 1:
		status = string(Running)
	case 2:
		status = sharedStatus
	default:
		status = string(Finished)
	}
	return v / 4, status
}

// dropExpired deletes, in tx, those of the owners' rows of key that are
// expired, and returns how many it deleted. The list is padded to a power
// of two with repeats of its last owner, so that a few prepared
// statements serve every size.
func (d *sqlDriver) dropExpired(ctx context.Context, tx *sql.Tx, st, key string, owners []any) (int, error) {
	size := padded(len(owners))
	args := make([]any, 0, 1+size)
	args = append(args, key)
	for j := range size {
		args = append(args, owners[min(j, len(owners)-1)])
	}
	var b strings.Builder
	placeholders(&b, size, "?")
	res, err := d.txExec(ctx, tx, "DELETE FROM "+st+" WHERE task_name = ? AND owner_token IN ("+b.String()+") AND lock_until <= "+dbNow, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// admit decides whether a request for s by owner fits the live rows of
// its key: no writer holds it, a writer needs no holder, permits need the
// holders' weights and their own within the limit, and no earlier waiter
// is in line (for a reader, no earlier waiting writer). It returns whether
// it fits, owner's place in line (nil when not in line), and how long
// until the first holder's claim ends. It fails with driver.ErrConflict
// when the key is used another way.
func admit(rows []shareRow, owner string, s driver.Share) (fits bool, me *shareRow, next time.Duration, err error) {
	var (
		used, holders int
		write         bool
	)
	for i := range rows {
		r := &rows[i]
		if (r.mode == driver.Permits) != (s.Mode == driver.Permits) || r.limit != s.Limit {
			return false, nil, 0, fmt.Errorf("%w: the key is %s, not %s", driver.ErrConflict, shareKindOf(r.mode, r.limit), shareKindOf(s.Mode, s.Limit))
		}
		if r.owner == owner && r.queued > 0 {
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
	fits = !write && (s.Mode != driver.Write || holders == 0) && (s.Mode != driver.Permits || used+s.Weight <= s.Limit)
	for _, r := range rows {
		// Behind every earlier waiter (all of them when not in line):
		// readers only behind writers.
		if r.queued > 0 && (me == nil || r.queued < me.queued) && (s.Mode != driver.Read || r.mode == driver.Write) {
			fits = false
		}
	}
	return fits, me, next, nil
}

// queued is the refusal of a request recorded in line: back before the
// record expires, and a Residue that withdraws it.
func (d *sqlDriver) queued(req driver.Request, next time.Duration) error {
	if r := req.TTL / 3; next <= 0 || next > r {
		next = r
	}
	key, owner := req.Key, req.Owner
	return &driver.Residue{Err: driver.Held(next), Cleanup: func(ctx context.Context) error {
		d.unlined(key, owner)
		err := d.leave(ctx, key, owner, 0)
		if err == nil {
			d.changed(key, "") // it may have been first in line
		}
		return err
	}}
}

// coverShare marks the key's row SHARED, which plain acquisitions never
// take, with a lock_until no earlier than ttl µs from now (for Inspect and
// the waiters' backoff); a version other than 0 becomes the row's. It
// fails with errFenced once the fence passed.
func (d *sqlDriver) coverShare(ctx context.Context, tx *sql.Tx, key string, ttl int64, f driver.Fence, version uint64) error {
	set, args := "", []any{ttl, key, f.Store}
	if version != 0 {
		set, args = "version = ?, ", append([]any{version}, args...)
	}
	return d.fencedExec(ctx, tx, "UPDATE "+d.sql.table+" SET "+set+"task_status = '"+sharedStatus+"',"+
		" lock_until = GREATEST(IF(task_status = '"+sharedStatus+"', lock_until, "+dbNow+"), "+untilExpr+"), update_time = "+dbNow+
		" WHERE task_name = ? AND "+beforeFence, args...)
}

// fencedExec runs, in tx, an UPDATE of the key's row whose last argument
// is a fence. It fails with errFenced when it changed no row: the fence
// passed, and it took nothing.
func (d *sqlDriver) fencedExec(ctx context.Context, tx *sql.Tx, text string, args ...any) error {
	res, err := d.txExec(ctx, tx, text, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err != nil {
			return err
		}
		return errFenced
	}
	return nil
}

// shareRows reads the key's holders and waiters, expired ones included
// (remaining not above 0), holders first, then waiters in line order; not
// a sequence row an earlier version left.
func (d *sqlDriver) shareRows(ctx context.Context, tx *sql.Tx, st, key string) ([]shareRow, error) {
	rs, err := d.txQuery(ctx, tx, "SELECT owner_token, mode, weight, share_limit, queued,"+
		" TIMESTAMPDIFF(MICROSECOND, "+dbNow+", lock_until) FROM "+st+
		" WHERE task_name = ? AND owner_token <> '' ORDER BY queued", key)
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

// leave deletes owner's live row of key (its hold when token is not 0,
// its place in line otherwise) by primary key, outside any transaction:
// deleting a row only makes room, and needs no lock of the key's row,
// which an attempt cut off from its client may hold. It leaves the key's
// row marked SHARED even when no live row is left: the next first holder's
// transaction takes the row then, and the next plain acquisition settles
// the row first. It returns driver.ErrNotHeld when
// there was nothing to delete.
func (d *sqlDriver) leave(ctx context.Context, key, owner string, token uint64) error {
	st, err := d.sharedTable()
	if err != nil {
		return err
	}
	text, args := leaveSQL(st, "queued > 0"), []any{key, owner}
	if token != 0 {
		text, args = leaveSQL(st, "token = ? AND queued = 0"), append(args, token)
	}
	del, err := d.sharedStmt(ctx, text)
	if err != nil {
		return classify(err)
	}
	res, err := del.ExecContext(ctx, args...)
	if err != nil {
		return classify(err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return err
		}
		return driver.ErrNotHeld
	}
	return nil
}

// leaveSQL deletes an owner's live row of a key in the table of shared
// holds st, chosen by cond. Args: key, owner, then cond's.
func leaveSQL(st, cond string) string {
	return "DELETE FROM " + st + " WHERE task_name = ? AND owner_token = ? AND " + cond + " AND lock_until > " + dbNow
}

// undoShare deletes owner's live hold or place in line of key, which an
// attempt whose outcome is unknown may have left, and settles the key's
// row. It locks the key's row first, so that it runs after the attempt
// if it is still writing. It returns driver.ErrNotHeld when there was
// nothing to delete.
func (d *sqlDriver) undoShare(ctx context.Context, key, owner string) error {
	err := d.inShareTx(ctx, key, func(tx *sql.Tx, st string) (int64, error) {
		res, err := d.txExec(ctx, tx, "DELETE FROM "+st+" WHERE task_name = ? AND owner_token = ? AND lock_until > "+dbNow, key, owner)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
	if err == nil {
		d.changed(key, "")
	}
	return err
}

// inShareTx runs change in a transaction that holds the key's row, then
// settles the row. It returns driver.ErrNotHeld when the key is not held
// by shared holds or change affected no row.
func (d *sqlDriver) inShareTx(ctx context.Context, key string, change func(*sql.Tx, string) (int64, error)) (err error) {
	st, err := d.sharedTable()
	if err != nil {
		return err
	}
	for range maxAttempts {
		err = d.inTx(ctx, txIdle(d.ttl), func(tx *sql.Tx) error {
			_, status, err := d.lockKey(ctx, tx, key)
			if err != nil {
				return err
			}
			if status != sharedStatus {
				return driver.ErrNotHeld
			}
			n, err := change(tx, st)
			if err != nil {
				return err
			}
			if n == 0 {
				return driver.ErrNotHeld
			}
			_, err = d.settle(ctx, tx, st, key)
			return err
		})
		if errors.Is(err, errSole) {
			err = d.moveSole(ctx, st, key)
			if err == nil {
				continue
			}
		}
		if !contended(err) && !errors.Is(err, errRenewed) {
			return classify(err)
		}
	}
	return classify(err)
}

// settle deletes, in tx, which holds the key's row (lockKey), the key's
// expired holds and waiters, frees the key's row when no row is left, and
// reports whether it did. The delete waits for a renewal on the way, and a
// renewal never brings back an expired row: a row that is left was live.
// A freed row keeps its version, the key's latest token.
func (d *sqlDriver) settle(ctx context.Context, tx *sql.Tx, st, key string) (bool, error) {
	if _, err := d.txExec(ctx, tx, "DELETE FROM "+st+" WHERE task_name = ? AND owner_token <> '' AND lock_until <= "+dbNow, key); err != nil {
		return false, err
	}
	res, err := d.txExec(ctx, tx, "UPDATE "+d.sql.table+" SET task_status = 'FINISH', finish_time = "+dbNow+
		", lock_until = "+dbNow+", update_time = "+dbNow+
		" WHERE task_name = ? AND task_status = '"+sharedStatus+"' AND NOT EXISTS (SELECT 1 FROM "+st+" WHERE task_name = ? AND owner_token <> '')",
		key, key)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return false, err
	}
	return true, nil
}

// settleShared frees the row of a key marked as held by shared holds when
// none is live (their holders crashed, or the last one left), and
// reports whether the row is free of shared holds now. It makes up to
// tries attempts, each waiting for the key's row at most txIdle.
func (d *sqlDriver) settleShared(ctx context.Context, key string, tries int) (bool, error) {
	st, err := d.sharedTable()
	if err != nil {
		return false, err
	}
	free := false
	for range tries {
		err = d.inTx(ctx, txIdle(d.ttl), func(tx *sql.Tx) error {
			_, status, err := d.lockKey(ctx, tx, key)
			if err != nil || status != sharedStatus {
				free = err == nil
				return err
			}
			free, err = d.settle(ctx, tx, st, key)
			return err
		})
		if errors.Is(err, errSole) {
			return false, nil // held by the shared hold in its row
		}
		if !contended(err) && !errors.Is(err, errRenewed) {
			break
		}
	}
	return free, classify(err)
}

// SetLimit implements driver.Limiter: one transaction that locks the key's
// row, as attempts do, and sets the limit of every live holder and waiter;
// a hold in the key's row moves out first. Then it wakes the key's
// waiters (wake.go) before it returns.
func (d *sqlDriver) SetLimit(ctx context.Context, key string, limit int) error {
	st, err := d.sharedTable()
	if err != nil {
		return err
	}
	for range maxAttempts {
		err = d.setLimit(ctx, st, key, limit)
		if errors.Is(err, errSole) {
			if err = d.moveSole(ctx, st, key); err == nil || contended(err) {
				continue
			}
		}
		if !contended(err) && !errors.Is(err, errRenewed) {
			break
		}
	}
	if err != nil && !errors.Is(err, driver.ErrConflict) {
		return fmt.Errorf("setlimit: %w", classify(err))
	}
	if err == nil && d.notify != nil {
		d.notify.wakeNow(ctx, key)
	}
	return err
}

// setLimit is one transaction of SetLimit.
func (d *sqlDriver) setLimit(ctx context.Context, st, key string, limit int) error {
	return d.inTx(ctx, txIdle(d.ttl), func(tx *sql.Tx) error {
		_, status, err := d.lockKey(ctx, tx, key)
		switch {
		case err != nil:
			return err
		case status == string(Running):
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
		_, err = d.txExec(ctx, tx, "UPDATE "+st+" SET share_limit = ? WHERE task_name = ? AND owner_token <> ''", limit, key)
		return err
	})
}
