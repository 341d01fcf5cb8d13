package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

// releaseShared ends a shared hold (driver.Driver.Release): one UPDATE
// of the key's row for a hold in it, which frees the key, and otherwise
// one DELETE of the hold's own row.
func (d *sqlDriver) releaseShared(ctx context.Context, s *shareState) error {
	// Whatever the outcome, this owner is done with the key: its named
	// lock goes after the statement returned, so after the hold left.
	defer d.forget(lockState{key: s.key, owner: s.owner})
	leave := func() (bool, error) {
		err := d.leave(ctx, s.key, s.owner, s.token)
		if err == nil {
			// Other holds or waiters share the key: they may fit now.
			d.changed(s.key, s.owner)
		}
		return !errors.Is(err, driver.ErrNotHeld), err
	}
	if s.rowHeld() {
		if ended, err := d.inRow(ctx, s, "release", soleReleaseSQL(d.sql.table), leave, s.key, s.owner, s.token); ended {
			return err
		}
	}
	if _, err := leave(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// keepShared leaves a shared hold in place for remaining, renewed by
// nobody (driver.Keeper.Keep). It changes only the hold's own row: the
// key's row for a hold in it (finish_time set), its row in the table of
// shared holds otherwise.
func (d *sqlDriver) keepShared(ctx context.Context, s *shareState, remaining time.Duration) error {
	st, err := d.sharedTable()
	if err != nil {
		return err
	}
	keep := func() (bool, error) {
		res, err := d.db.ExecContext(ctx, "UPDATE "+st+" SET kept = 1, lock_until = "+untilExpr+
			" WHERE task_name = ? AND owner_token = ? AND token = ? AND queued = 0 AND lock_until > "+dbNow,
			max(remaining.Microseconds(), 1), s.key, s.owner, s.token)
		if err != nil {
			return true, classify(err)
		}
		n, err := res.RowsAffected()
		return err != nil || n > 0, err
	}
	if s.rowHeld() {
		if ended, err := d.inRow(ctx, s, "keep", "UPDATE "+d.sql.table+" SET finish_time = "+dbNow+", lock_until = "+untilExpr+", update_time = "+dbNow+
			" WHERE task_name = ? AND owner_token = ? AND version = ? AND task_status = '"+soleStatus+"' AND lock_until > "+dbNow,
			keep, max(remaining.Microseconds(), 1), s.key, s.owner, s.token); ended {
			return err
		}
	}
	switch done, err := keep(); {
	case err != nil:
		return fmt.Errorf("keep: %w", err)
	case !done:
		return driver.ErrNotHeld
	}
	return nil
}

// inRow runs text, op's statement on s while s is in its key's row, as
// execInRow does, with moved op's change in the table of shared holds. It
// reports whether op ended there, with op's error; otherwise s moved out
// of the row (or is gone), which it records, and op goes on in the table.
func (d *sqlDriver) inRow(ctx context.Context, s *shareState, op, text string, moved func() (bool, error), args ...any) (ended bool, err error) {
	res, done, err := d.execInRow(ctx, text, moved, args...)
	if done {
		if err != nil {
			return true, fmt.Errorf("%s: %w", op, err)
		}
		s.moved.Store(true)
		return true, nil
	}
	if err != nil {
		return true, fmt.Errorf("%s: %w", op, classify(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		if err != nil {
			return true, fmt.Errorf("%s: %w", op, err)
		}
		return true, nil
	}
	s.moved.Store(true) // moved out of the row, or gone
	return false, nil
}

// execInRow runs text, a statement on a shared hold in its key's row, with
// args (again after a deadlock, see execRetried). On MariaDB it runs it first without waiting
// for the row's lock. A transaction that holds that lock is an attempt
// (cut off from its client, it keeps it until the server ends its session)
// or a statement of a move: an attempt locks a key's row only once no live
// hold is in it, so the hold most likely moved out. Then moved, the same
// change in the table of shared holds, runs first; done reports that it
// found the hold there, and err is then its error. Only when it did not
// does the statement wait for the row.
func (d *sqlDriver) execInRow(ctx context.Context, text string, moved func() (bool, error), args ...any) (res sql.Result, done bool, err error) {
	if d.mariaDB {
		now, err := d.sharedStmt(ctx, "SET STATEMENT innodb_lock_wait_timeout = 0 FOR "+text)
		if err != nil {
			return nil, false, err
		}
		// It never waits, so it is never a deadlock's victim either.
		res, err = now.ExecContext(ctx, args...)
		if me := (*gomysql.MySQLError)(nil); !errors.As(err, &me) || me.Number != 1205 {
			return res, false, err
		}
		if done, err := moved(); done {
			return nil, true, err
		}
	}
	wait, err := d.sharedStmt(ctx, text)
	if err != nil {
		return nil, false, err
	}
	res, err = execRetried(ctx, wait, args...)
	return res, false, err
}

// breakShared ends every hold on key (driver.Breaker.Break); the waiters
// stay in line.
func (d *sqlDriver) breakShared(ctx context.Context, key string) error {
	err := d.inShareTx(ctx, key, func(tx *sql.Tx, st string) (int64, error) {
		res, err := d.txExec(ctx, tx, "DELETE FROM "+st+" WHERE task_name = ? AND queued = 0 AND lock_until > "+dbNow, key)
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

// inspectShared reads the holders of a key held by shared holds.
func (d *sqlDriver) inspectShared(ctx context.Context, key string) (driver.Status, error) {
	sts, err := d.inspectSharedKeys(ctx, []string{key})
	return sts[key], err
}

// inspectSharedKeys reads the holders of keys held by shared holds, in one
// query per 500 keys; a key without a live holder or waiter is missing
// from the map.
func (d *sqlDriver) inspectSharedKeys(ctx context.Context, keys []string) (map[string]driver.Status, error) {
	st, err := d.sharedTable()
	if err != nil {
		return nil, err
	}
	sts := make(map[string]driver.Status, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), 500)
		args := make([]any, n)
		for i, k := range keys[:n] {
			args[i] = k
		}
		keys = keys[n:]
		var in strings.Builder
		placeholders(&in, n, "?")
		rs, err := d.db.QueryContext(ctx, "SELECT task_name, mode, weight, share_limit, token, queued, owner_label, "+
			micros("start_time")+", "+micros("lock_until")+" FROM "+st+
			" WHERE task_name IN ("+in.String()+") AND lock_until > "+dbNow+" ORDER BY task_name, queued, token", args...)
		if err != nil {
			return nil, err
		}
		err = scanShared(rs, sts)
		_ = rs.Close()
		if err != nil {
			return nil, err
		}
	}
	for k, s := range sts {
		if n := len(s.Holders); n > 0 {
			h := s.Holders[n-1]
			s.Held, s.Label, s.Token, s.Acquired, s.Expires = true, h.Label, h.Token, h.Acquired, h.Expires
			sts[k] = s
		}
	}
	return sts, nil
}

// scanShared adds the rows of inspectSharedKeys to the keys' statuses.
func scanShared(rs *sql.Rows, sts map[string]driver.Status) error {
	for rs.Next() {
		var (
			h              driver.Holder
			key            []byte
			mode           uint8
			limit          int
			queued         uint64
			label          []byte
			start, expires sql.NullInt64
		)
		if err := rs.Scan(&key, &mode, &h.Weight, &limit, &h.Token, &queued, &label, &start, &expires); err != nil {
			return err
		}
		s := sts[string(key)]
		if driver.Mode(mode) == driver.Permits {
			s.Limit = limit
		}
		if queued > 0 {
			s.Waiters++
		} else {
			h.Mode, h.Label, h.Acquired, h.Expires = driver.Mode(mode), string(label), utc(start), utc(expires)
			s.Holders = append(s.Holders, h)
		}
		sts[string(key)] = s
	}
	return rs.Err()
}

// renewShared renews shared leases ls[idx...] of one TTL that live in the
// table of shared holds: one UPDATE of the holds' own rows, each found by
// its primary key, and one SELECT when
// some lease did not match, to tell which. It never touches the keys' rows
// nor another holder's or waiter's row, so that no lock an attempt holds
// (one cut off from its client holds them a while) can hold it up.
func (d *sqlDriver) renewShared(ctx context.Context, ls []driver.Lease, idx []int, ttl time.Duration, validity []time.Duration, errs []error) {
	fail := func(err error) {
		for _, i := range idx {
			errs[i] = fmt.Errorf("renew: %w", err)
		}
	}
	st, err := d.sharedTable()
	if err != nil {
		fail(err)
		return
	}
	want := map[shareID]bool{}
	holds := make([]any, 0, 3*len(idx))
	inRow := true // every lease may be in its key's row
	for _, i := range idx {
		s := ls[i].State.(*shareState)
		holds = append(holds, s.key, s.owner, s.token)
		want[s.id()] = true
		inRow = inRow && s.rowHeld()
	}
	var b strings.Builder
	placeholders(&b, len(idx), "(task_name = ? AND owner_token = ? AND token = ?)")
	match := strings.ReplaceAll(b.String(), ", ", " OR ")
	var n int64
	err = d.renewer.run(ctx, func(t sqlTarget, _ prepareFunc) error {
		res, err := t.ExecContext(ctx, "UPDATE "+st+" SET lock_until = "+untilExpr+
			" WHERE ("+match+") AND queued = 0 AND kept = 0 AND lock_until > "+dbNow,
			append([]any{ttlMicros(ttl)}, holds...)...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		fail(classify(err))
		return
	}
	renewed := want
	switch {
	case n == 0 && inRow:
		renewed = nil // all in their keys' rows, as they were taken
	case int(n) != len(want):
		err := d.renewer.run(ctx, func(t sqlTarget, _ prepareFunc) error {
			renewed = map[shareID]bool{}
			rs, err := t.QueryContext(ctx, "SELECT task_name, owner_token, token FROM "+st+
				" WHERE ("+match+") AND queued = 0 AND kept = 0 AND lock_until > "+dbNow, holds...)
			if err != nil {
				return err
			}
			defer rs.Close()
			for rs.Next() {
				var key, owner []byte
				var token uint64
				if err := rs.Scan(&key, &owner, &token); err != nil {
					return err
				}
				renewed[shareID{key: string(key), owner: string(owner), token: token}] = true
			}
			return rs.Err()
		})
		if err != nil {
			fail(classify(err))
			return
		}
	}
	for _, i := range idx {
		if s := ls[i].State.(*shareState); renewed[s.id()] {
			validity[i] = ttl
			if d.notify != nil {
				d.notify.renewed(s.key, s.owner)
			}
		} else {
			errs[i] = driver.ErrNotHeld
			if d.notify != nil {
				d.notify.released(s.key, s.owner) // lost: its name need not wait for a TTL
			}
		}
	}
}

// execRetried runs an autocommit statement, and again after a deadlock or
// a lock wait timeout, which rolled it back: up to maxAttempts times.
func execRetried(ctx context.Context, stmt *sql.Stmt, args ...any) (res sql.Result, err error) {
	for range maxAttempts {
		if res, err = stmt.ExecContext(ctx, args...); !contended(err) {
			break
		}
	}
	return res, err
}

// shareKindOf names the use of a key, for conflict errors.
func shareKindOf(mode driver.Mode, limit int) string {
	if mode == driver.Permits {
		return fmt.Sprintf("a semaphore of %d permits", limit)
	}
	return "a read-write lock"
}

// prepared returns the prepared statement of text on tx (see sharedStmt).
func (d *sqlDriver) prepared(ctx context.Context, tx *sql.Tx, text string) (*sql.Stmt, error) {
	s, err := d.sharedStmt(ctx, text)
	if err != nil {
		return nil, err
	}
	return tx.StmtContext(ctx, s), nil
}

// sharedStmt returns the prepared statement of text, preparing it on the
// pool on first use: a transaction on shared holds runs up to seven
// statements, and each unprepared one with arguments costs two round
// trips.
func (d *sqlDriver) sharedStmt(ctx context.Context, text string) (*sql.Stmt, error) {
	d.mu.Lock()
	s := d.shared[text]
	closed := d.closed
	d.mu.Unlock()
	if s != nil {
		return s, nil
	}
	if closed {
		return nil, errors.New("driver closed")
	}
	s, err := d.db.PrepareContext(ctx, text)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch old := d.shared[text]; {
	case d.closed:
		_ = s.Close()
		return nil, errors.New("driver closed")
	case old != nil:
		_ = s.Close()
		return old, nil
	}
	d.shared[text] = s
	return s, nil
}

func (d *sqlDriver) txExec(ctx context.Context, tx *sql.Tx, text string, args ...any) (sql.Result, error) {
	s, err := d.prepared(ctx, tx, text)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(ctx, args...)
}

func (d *sqlDriver) txQuery(ctx context.Context, tx *sql.Tx, text string, args ...any) (*sql.Rows, error) {
	s, err := d.prepared(ctx, tx, text)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(ctx, args...)
}

// errRow is a Scan that fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (d *sqlDriver) txQueryRow(ctx context.Context, tx *sql.Tx, text string, args ...any) interface{ Scan(...any) error } {
	s, err := d.prepared(ctx, tx, text)
	if err != nil {
		return errRow{err}
	}
	return s.QueryRowContext(ctx, args...)
}
