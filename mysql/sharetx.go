package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// txIdle is how long a transaction on shared holds of a lock with this
// TTL may wait for its client before the server ends its session: a third
// of the TTL in whole seconds, rounded up, within 1 s and 10 s. A client
// cut off in the middle of one holds up the key's other attempts that
// long, not for as long as the cut.
func txIdle(ttl time.Duration) int64 {
	return min(max(int64((ttl/3+time.Second-1)/time.Second), 1), 10)
}

// restoreTimeout bounds the statement that gives the session its
// wait_timeout back.
const restoreTimeout = 5 * time.Second

// txTries bounds the transactions inTx runs for one call: a first one,
// and one more when the first one's connection broke before its commit.
const txTries = 2

// inTx runs fn in a READ COMMITTED transaction on a connection of its
// own, committing when fn returns nil. The session's isolation level is
// READ COMMITTED while it runs, and gets its own back afterwards. While
// the transaction runs, the session's wait_timeout is idle seconds: the
// server ends the session when the client stays silent that long, so that
// a client cut off in the middle does not keep its row locks. Its
// innodb_lock_wait_timeout is idle seconds too: waiting longer for a row
// lock only waits for a transaction that is not one of ours (a statement
// that gives up fails with error 1205, see contended). The session gets
// both values back afterwards, after inTx returned, before it goes back
// to the pool; a connection that cannot be given them back is discarded.
//
// A transaction whose connection broke before its commit was sent (a
// session that wait_timeout ended, on a loaded machine) was rolled back:
// inTx runs fn once more, on another connection, unless ctx ended. Its
// error then wraps errRolledBack, and so is definite. A connection that
// broke during the commit leaves the outcome unknown: inTx returns that
// error as it is, and does not run fn again. fn must set what it reports
// to its caller only on its way to returning nil.
func (d *sqlDriver) inTx(ctx context.Context, idle int64, fn func(*sql.Tx) error) (err error) {
	for range txTries {
		err = d.txOnce(ctx, idle, fn)
		if !errors.Is(err, errRolledBack) || ctx.Err() != nil {
			break
		}
	}
	return err
}

// txOnce is one transaction of inTx.
func (d *sqlDriver) txOnce(ctx context.Context, idle int64, fn func(*sql.Tx) error) error {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	// The restore is off the caller's path: it needs a round trip, and
	// the outcome is known without it. A cancelled ctx must not leave the
	// short wait_timeout on a pooled connection.
	d.restores.Add(1)
	defer func() { go d.restoreSession(context.WithoutCancel(ctx), conn) }()
	set := fmt.Sprintf("SET @locker_wait_timeout = @@session.wait_timeout, @locker_lock_wait_timeout = @@session.innodb_lock_wait_timeout,"+
		" @@session.wait_timeout = %d, @@session.innodb_lock_wait_timeout = %d", idle, idle)
	opts := &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	if v := d.isolationVar; v != "" {
		// The isolation level rides in the same statement, not in one
		// of its own before START TRANSACTION.
		set += ", @locker_isolation = @@session." + v + ", @@session." + v + " = 'READ-COMMITTED'"
		opts = nil
	}
	if _, err := conn.ExecContext(ctx, set); err != nil {
		return rolledBack(err)
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		return rolledBack(err)
	}
	if d.txStall != nil {
		if err := d.txStall(tx); err != nil {
			_ = tx.Rollback()
			return rolledBack(err)
		}
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return rolledBack(err)
	}
	return tx.Commit()
}

// errRolledBack marks the error of a transaction on shared holds whose
// connection broke before its commit was sent, in its last try (inTx):
// the server rolls back the transaction of a session that ends, so
// nothing of it was done. A session idle for longer than inTx's short
// wait_timeout ends so, as on a loaded machine.
var errRolledBack = errors.New("the connection broke before the commit, which rolled the transaction back")

// rolledBack wraps err in errRolledBack when it says the connection
// broke.
func rolledBack(err error) error {
	if broken(err) {
		return fmt.Errorf("%w: %w", errRolledBack, err)
	}
	return err
}

// restoreSession gives conn the session variables inTx changed back and
// returns it to the pool, or discards it when that fails.
func (d *sqlDriver) restoreSession(ctx context.Context, conn *sql.Conn) {
	defer d.restores.Done()
	ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	restore := "SET @@session.wait_timeout = @locker_wait_timeout, @@session.innodb_lock_wait_timeout = @locker_lock_wait_timeout"
	if v := d.isolationVar; v != "" {
		restore += ", @@session." + v + " = @locker_isolation"
	}
	if _, err := conn.ExecContext(ctx, restore); err != nil {
		_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	}
	_ = conn.Close()
}
