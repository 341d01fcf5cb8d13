package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

// TryAcquire implements driver.Driver. An existing row that is free or
// expired is taken by one conditional UPDATE (one round trip); a missing row
// is created already taken by INSERT IGNORE (two round trips). Only when both
// affect no row does a third statement read the holder's remaining time.
func (d *sqlDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.tryAcquire(ctx, req)
	if err == nil && d.notify != nil {
		// The holder goroutine takes the key's named lock, so that a
		// waiter in line is woken by the release.
		d.notify.acquired(req.Key, req.Owner)
	}
	return g, classify(err)
}

// classify marks the database errors no retry can cure: access denied to
// the database, the table or a command, and a table that does not exist.
func classify(err error) error {
	if err != nil && strings.Contains(err.Error(), "sql: database is closed") {
		return driver.Permanent(err) // database/sql does not export it
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1044, 1045, 1142, 1143, 1146, 1227, 1370:
			return driver.Permanent(err)
		}
	}
	return err
}

// acquireArgs returns the arguments of req's acquiring UPDATE (acquire,
// acquireIdle), the fence left out.
func (d *sqlDriver) acquireArgs(req driver.Request) ([]any, error) {
	if len(req.Owner) > maxOwnerBytes {
		return nil, driver.Permanent(fmt.Errorf("owner token of %d bytes exceeds owner_token's %d", len(req.Owner), maxOwnerBytes))
	}
	label := d.label
	if req.Label != "" && req.Label != label {
		label = cleanLabel(req.Label)
	}
	return []any{req.Owner, label, dataArg(req.Data), ttlMicros(req.TTL), req.Key}, nil
}

// tryIdle takes the row of req.Key when it has been free for idleFor at
// least, with one UPDATE; otherwise it answers driver.Held(0). A missing
// row is not created.
func (d *sqlDriver) tryIdle(ctx context.Context, req driver.Request) (driver.Grant, error) {
	args, err := d.acquireArgs(req)
	if err != nil {
		return driver.Grant{}, err
	}
	g, ok, err := d.exec(ctx, req, "acquire", d.acquireIdle, args...)
	if ok || err != nil {
		return g, err
	}
	return driver.Grant{}, driver.Held(0)
}

func (d *sqlDriver) tryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	args, err := d.acquireArgs(req)
	if err != nil {
		return driver.Grant{}, err
	}
	label, data, ttl := args[1], args[2], args[3]
	g, ok, err := d.exec(ctx, req, "acquire", d.acquire, args...)
	if ok || err != nil {
		return g, err
	}
	g, ok, err = d.exec(ctx, req, "insert", d.insert, req.Key, req.Owner, label, data, ttl)
	if ok || err != nil {
		return g, err
	}
	settled, late := false, 0
	for {
		var rem sql.NullInt64
		var now int64
		var shared sql.NullBool
		sent := time.Now()
		if err := d.remaining.QueryRowContext(ctx, req.Key).Scan(&rem, &now, &shared); err != nil {
			return driver.Grant{}, fmt.Errorf("read holder: %w", err)
		}
		// A fence already past on arrival (a database clock that jumped) takes
		// nothing: the retry below uses the fresh reading.
		d.clock.Observe(now, sent, time.Since(sent))
		switch {
		case shared.Valid && shared.Bool && !settled:
			// Shared holds hold the key, or held it until their holders
			// crashed: then it is free after settling.
			settled = true
			free, err := d.settleShared(ctx, req.Key, 1)
			if contended(err) {
				return driver.Grant{}, driver.Held(0) // an attempt on shared holds is at it
			}
			if err != nil {
				return driver.Grant{}, fmt.Errorf("acquire: %w", err)
			}
			if !free {
				return driver.Grant{}, errSharedKey
			}
			if g, ok, err := d.exec(ctx, req, "acquire", d.acquire, args...); ok || err != nil {
				return g, err
			}
			continue
		case shared.Valid && shared.Bool:
			return driver.Grant{}, errSharedKey
		case rem.Valid && rem.Int64 > 0:
			return driver.Grant{}, driver.Held(time.Duration(rem.Int64) * time.Microsecond)
		}
		if late == lateTries {
			return driver.Grant{}, driver.Held(0)
		}
		// Free: released or expired between our statements, or our last
		// statement reached the database after its fence (it waited that
		// long for one of the pool's connections) and took nothing. One
		// more statement, with a fresh fence: an insert when there is no
		// row, which an UPDATE cannot create.
		late++
		if !rem.Valid && !shared.Valid {
			g, ok, err = d.exec(ctx, req, "insert", d.insert, req.Key, req.Owner, label, data, ttl)
		} else {
			g, ok, err = d.exec(ctx, req, "acquire", d.acquire, args...)
		}
		if ok || err != nil {
			return g, err
		}
	}
}

// lateTries is how many more statements an attempt sends when it finds the
// key free after its statements took nothing.
const lateTries = 3

// errSharedKey is the refusal of a plain lock on a key held by shared
// holds.
var errSharedKey = fmt.Errorf("%w: the key is held by shared holds (a semaphore or a read-write lock), not a plain lock", driver.ErrConflict)

// exec runs an acquiring statement, args then its fence. It reports ok when
// it took the row, and an error only for a failure; a row it did not take
// is (zero, false, nil). The error of a statement whose outcome is unknown
// carries a driver.Residue that undoes it.
func (d *sqlDriver) exec(ctx context.Context, req driver.Request, what string, stmt *sql.Stmt, args ...any) (driver.Grant, bool, error) {
	// The row's lock_until counts from the statement, not from the call:
	// a Lock that waited in Acquire must not lose the time it waited.
	var sent time.Time
	var f driver.Fence
	var res sql.Result
	var err error
	for try := 1; ; try++ {
		sent = time.Now()
		f = d.clock.Fence(ctx, sent, req.TTL)
		if d.execErr != nil {
			err = d.execErr(what)
		}
		if err == nil {
			res, err = stmt.ExecContext(ctx, append(args, f.Store)...)
		}
		// A deadlock's victim learned nothing about the key: the cycle
		// may run through gap locks of other keys' transactions (a
		// LockMulti, a settling of shared holds). It runs again, a few
		// times, before it counts as contention.
		if !deadlocked(err) || try == deadlockTries || ctx.Err() != nil {
			break
		}
		err = nil
	}
	if err != nil {
		if contended(err) {
			// Rolled back by a deadlock or a lock wait timeout on the
			// row: certainly not taken, and someone else is at it.
			return driver.Grant{}, false, driver.Held(0)
		}
		err = fmt.Errorf("%s: %w", what, err)
		if !definite(err) {
			err = d.residue(err, req.Key, req.Owner, f)
		}
		return driver.Grant{}, false, err
	}
	// LAST_INSERT_ID(expr) may have been evaluated even when no row was
	// taken (INSERT IGNORE on an existing row): rows affected decides.
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return driver.Grant{}, false, err
	}
	id, err := res.LastInsertId()
	if err != nil || id <= 0 {
		return driver.Grant{}, false, d.residue(fmt.Errorf("%s: no version returned (LAST_INSERT_ID %d): %v", what, id, err), req.Key, req.Owner, f)
	}
	return driver.Grant{
		Token:    uint64(id),
		Validity: req.TTL,
		Since:    sent,
		State:    &lockState{table: d.cfg.Table, key: req.Key, owner: req.Owner, version: uint64(id)},
	}, true, nil
}

// deadlockTries is how many times exec runs a statement that a deadlock
// rolled back.
const deadlockTries = 3

// deadlocked reports whether err is MySQL's answer to a statement that a
// deadlock rolled back (1213).
func deadlocked(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

// contended reports whether err is a MySQL error saying the statement was
// rolled back because of contention on a row: a deadlock (1213) or a lock
// wait timeout (1205, for example behind a long Guard transaction).
func contended(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// definite reports whether a failed statement certainly did not run to
// completion: the server answered with an error (an autocommit statement
// that fails is rolled back), the driver says nothing was sent, or a
// transaction's connection broke before its commit (errRolledBack).
//
// The driver says nothing was sent with driver.ErrBadConn, which
// database/sql returns once its tries on other connections failed alike.
// go-sql-driver returns it only before it wrote the command, or when the
// server refused the statement as read-only (rejectReadOnly). A prepared
// statement of a *sql.Conn whose connection went bad so ends with
// sql.ErrConnDone.
func definite(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) || errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, errRolledBack)
}
