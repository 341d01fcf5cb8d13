package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// runner runs statements, on a pool or in a transaction.
type runner interface {
	// exec runs a statement and returns the rows it affected.
	exec(ctx context.Context, sql string, args ...any) (int64, error)
	// query runs a statement and calls row for each row it returns.
	query(ctx context.Context, sql string, args []any, row func(scan func(dest ...any) error) error) error
}

// querier is the little the driver needs of a database handle: statements
// on a pool, transactions, and one dedicated connection for LISTEN. It
// hides whether the caller gave a *pgxpool.Pool or a *sql.DB.
type querier interface {
	runner
	// txOnce runs fn in a READ COMMITTED transaction on a connection of
	// its own, whatever the session's default isolation (see txOn). It
	// commits when fn returns nil and rolls back otherwise. The server
	// ends the session when the transaction waits for the client for
	// longer than idle, so that a client cut off in the middle does not
	// keep its row locks. The error of a transaction whose connection
	// closed before its commit was sent wraps errRolledBack.
	txOnce(ctx context.Context, idle time.Duration, fn func(runner) error) error
	// batch sends stmts at once, in one round trip, and runs them as one
	// READ COMMITTED transaction, whatever the session's default
	// isolation: it commits when they all succeed and rolls back when one
	// fails, which ends the batch. It calls row for each row of the last
	// statement. The server runs the whole batch without waiting for the
	// client, so no lock it takes outlives the batch.
	batch(ctx context.Context, stmts []stmt, row func(scan func(dest ...any) error) error) error
	// listen calls use with a connection of its own, outside the pool,
	// and closes that connection when use returns.
	listen(ctx context.Context, use func(*pgx.Conn) error) error
}

// stmt is a statement and its arguments.
type stmt struct {
	sql  string
	args []any
}

// batchOf is the batch that runs stmts as querier.batch says: an implicit
// transaction, from the first statement to the Sync pgx sends after the
// last, whose first statement sets its isolation.
func batchOf(stmts []stmt) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
	for _, s := range stmts {
		b.Queue(s.sql, s.args...)
	}
	return b
}

// runBatch reads the results of br, sent as batchOf(stmts), and hands the
// last statement's rows to row.
func runBatch(br pgx.BatchResults, stmts []stmt, row func(scan func(dest ...any) error) error) error {
	err := func() error {
		for range stmts { // the isolation, then every statement but the last
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		return eachRow(rows, row)
	}()
	if err != nil {
		_ = br.Close()
		return err
	}
	return br.Close()
}

// pgxRunner runs statements on a pgx pool or transaction.
type pgxRunner struct {
	r interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	}
}

func (p pgxRunner) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := p.r.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (p pgxRunner) query(ctx context.Context, sql string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := p.r.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return eachRow(rows, row)
}

// poolQuerier runs statements on a *pgxpool.Pool.
type poolQuerier struct {
	pgxRunner
	p *pgxpool.Pool
}

func newPoolQuerier(p *pgxpool.Pool) poolQuerier { return poolQuerier{pgxRunner{p}, p} }

func (q poolQuerier) txOnce(ctx context.Context, idle time.Duration, fn func(runner) error) error {
	c, err := q.p.Acquire(ctx)
	if err != nil {
		return err
	}
	// The pool discards a connection that closed or is still in a
	// transaction.
	defer c.Release()
	return txOn(ctx, c.Conn(), idle, fn)
}

// txOn runs one transaction of querier.txOnce on c, for both queriers. A
// connection that closed before the commit was sent (the server ended
// the session: pg_terminate_backend, idle_in_transaction_session_timeout,
// a shutdown; or the socket broke) leaves nothing of the transaction:
// the server rolls back the transaction of a session that ends, and one
// whose socket broke never gets its COMMIT. txOn asks the connection
// itself, which pgx closes on every such fault, rather than reading the
// error. A connection that closed during the commit leaves the outcome
// unknown: that error stays as it is.
func txOn(ctx context.Context, c *pgx.Conn, idle time.Duration, fn func(runner) error) error {
	// One round trip: both statements go in one simple-protocol message.
	tx, err := c.BeginTx(ctx, pgx.TxOptions{BeginQuery: "BEGIN ISOLATION LEVEL READ COMMITTED; " + idleTimeout(idle)})
	if err == nil {
		if err = fn(pgxRunner{tx}); err == nil {
			return tx.Commit(ctx)
		}
	}
	// Asked before the rollback: a rollback that breaks the connection
	// does not make fn's own error a rolled-back one.
	closed := c.IsClosed()
	if tx != nil {
		_ = tx.Rollback(ctx)
	}
	if closed {
		return fmt.Errorf("%w: %w", errRolledBack, err)
	}
	return err
}

// errRolledBack marks the error of a transaction on shared holds whose
// connection closed before its commit was sent (txOn): nothing of it was
// done, and it may run again on another connection.
var errRolledBack = errors.New("the connection closed before the commit, and the transaction was rolled back")

// idleTimeout is the statement that sets the transaction's
// idle_in_transaction_session_timeout.
func idleTimeout(idle time.Duration) string {
	return fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", max(idle.Milliseconds(), 1))
}

func (q poolQuerier) batch(ctx context.Context, stmts []stmt, row func(scan func(dest ...any) error) error) error {
	return runBatch(q.p.SendBatch(ctx, batchOf(stmts)), stmts, row)
}

func (q poolQuerier) listen(ctx context.Context, use func(*pgx.Conn) error) error {
	c, err := connectLike(ctx, q.p.Config())
	if err != nil {
		return err
	}
	defer closeConn(c)
	return use(c)
}

// sqlRunner runs statements on a *sql.DB or in a *sql.Tx.
type sqlRunner struct {
	r interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
}

func (s sqlRunner) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	res, err := s.r.ExecContext(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlRunner) query(ctx context.Context, sql string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := s.r.QueryContext(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return eachRow(rows, row)
}

// dbQuerier runs statements on a *sql.DB opened with pgx/stdlib.
type dbQuerier struct {
	sqlRunner
	db *sql.DB
}

func newDBQuerier(db *sql.DB) dbQuerier { return dbQuerier{sqlRunner{db}, db} }

// exec runs a statement on a connection of db's (see again).
func (q dbQuerier) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	res, err := q.db.ExecContext(ctx, sql, args...)
	for n := 0; err != nil && q.again(ctx, err, n); n++ {
		res, err = q.db.ExecContext(ctx, sql, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// query runs a statement on a connection of db's (see again).
func (q dbQuerier) query(ctx context.Context, sql string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := q.db.QueryContext(ctx, sql, args...)
	for n := 0; err != nil && q.again(ctx, err, n); n++ {
		rows, err = q.db.QueryContext(ctx, sql, args...)
	}
	if err != nil {
		return err
	}
	defer rows.Close()
	return eachRow(rows, row)
}

// again reports whether a statement that failed with err, after n runs
// again, runs once more. database/sql answers driver.ErrBadConn for a
// statement it never sent, after its own tries. On a pool at its
// MaxOpenConns each of those tries, the last included, may wait for a
// connection given back, and take one that closed under its last user:
// pgx closes a connection whose statement's ctx ended, and pgx/stdlib has
// no driver.Validator, so the pool hands it on. Each such try closes the
// one it met, and the pool holds at most MaxOpenConns: after MaxOpenConns/3
// runs more, none that was closed when the statement began is left. A pool
// without a MaxOpenConns opens a new connection for the last try, and its
// failure is the answer. It stops when ctx ends.
func (q dbQuerier) again(ctx context.Context, err error, n int) bool {
	if !errors.Is(err, sqldriver.ErrBadConn) || ctx.Err() != nil {
		return false
	}
	maxOpen := q.db.Stats().MaxOpenConnections
	return maxOpen > 0 && n < maxOpen/3
}

// checkStdlib reports an error unless db's driver is pgx's: the driver
// sends Go slices as PostgreSQL arrays, and LISTEN needs a pgx connection.
func checkStdlib(db *sql.DB) error {
	if db == nil {
		return errors.New("nil *sql.DB")
	}
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return fmt.Errorf("*sql.DB uses the driver %T; the postgres backend needs github.com/jackc/pgx/v5/stdlib", db.Driver())
	}
	return nil
}

// txOnce runs the transaction on the pgx connection under one of db's,
// as batch does: one round trip fewer than database/sql's BEGIN, and the
// same test of a closed connection as on a pool.
func (q dbQuerier) txOnce(ctx context.Context, idle time.Duration, fn func(runner) error) error {
	return q.onConn(ctx, func(c *pgx.Conn) error { return txOn(ctx, c, idle, fn) })
}

func (q dbQuerier) batch(ctx context.Context, stmts []stmt, row func(scan func(dest ...any) error) error) error {
	return q.onConn(ctx, func(c *pgx.Conn) error { return runBatch(c.SendBatch(ctx, batchOf(stmts)), stmts, row) })
}

// listen holds one connection of db's pool while use runs, and discards
// it afterwards: its session listened.
func (q dbQuerier) listen(ctx context.Context, use func(*pgx.Conn) error) error {
	return q.onConn(ctx, func(c *pgx.Conn) error {
		err := use(c)
		// The session listened: never hand it back to the pool.
		return errors.Join(err, sqldriver.ErrBadConn)
	})
}

// onConn calls use with the pgx connection under one of db's, held while
// use runs. The connection goes back to the pool unless use returns
// driver.ErrBadConn.
func (q dbQuerier) onConn(ctx context.Context, use func(*pgx.Conn) error) error {
	c, err := q.db.Conn(ctx)
	for n := 0; err != nil && q.again(ctx, err, n); n++ {
		c, err = q.db.Conn(ctx)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("connection of type %T is not pgx's", dc)
		}
		return use(sc.Conn())
	})
}

// eachRow hands every row of rows to row, for pgx's rows and database/sql's
// alike.
func eachRow(rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}, row func(scan func(dest ...any) error) error) error {
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}
