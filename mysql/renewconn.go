package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"

	gomysql "github.com/go-sql-driver/mysql"
)

// renewConn runs a Locker's renewals on a connection it keeps, taken from
// the pool in Configure, so that a renewal round never waits for a
// connection of the caller's pool: the caller's own slow queries may hold
// every pooled connection (MaxOpenConns) for longer than a lock's
// validity, while the server would answer at once. Every statement it runs
// must be safe to run twice (renewals are): after a connection broke in
// the middle of one, the statement runs again on a new connection, within
// the same call. database/sql does not tell its SetConnMaxLifetime or
// SetConnMaxIdleTime, so the connection is kept until a statement on it
// fails. A pool whose MaxOpenConns is below minPoolForWakeups has no
// connection to spare: there the renewals run on the pool.
type renewConn struct {
	db  *sql.DB
	own bool // keep a connection; otherwise run on db's pool

	sem   chan struct{}         // one slot: held while a statement runs
	conn  *sql.Conn             // own: nil before the first use, after a failure and after close
	stmts map[stmtKey]*sql.Stmt // prepared on conn (own) or on db
	done  bool                  // close ran
}

// stmtKey names a prepared statement of renewConn: its text function and
// the size it was made for.
type stmtKey struct {
	name string
	n    int
}

// prepareFunc returns the statement text(n), prepared once for name and n.
type prepareFunc func(name string, n int, text func(int) string) (*sql.Stmt, error)

// sqlTarget is what statements run on: db's pool, or the kept connection.
type sqlTarget interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func newRenewConn(db *sql.DB) *renewConn {
	m := db.Stats().MaxOpenConnections
	return &renewConn{db: db, own: m == 0 || m >= minPoolForWakeups, sem: make(chan struct{}, 1), stmts: map[stmtKey]*sql.Stmt{}}
}

// open takes the connection, if the Locker keeps one and has none; ctx
// bounds the wait for it.
func (k *renewConn) open(ctx context.Context) error {
	if err := k.lock(ctx); err != nil {
		return err
	}
	defer k.unlock()
	_, err := k.target(ctx)
	return err
}

func (k *renewConn) lock(ctx context.Context) error {
	select {
	case k.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *renewConn) unlock() { <-k.sem }

// target returns what the next statement runs on, taking a connection
// when the Locker keeps one and has none. Called with the slot held.
func (k *renewConn) target(ctx context.Context) (sqlTarget, error) {
	switch {
	case k.done:
		return nil, errors.New("driver closed")
	case !k.own:
		return k.db, nil
	}
	if err := dbClosed(k.db); err != nil {
		// The caller closed db: the connection ends with it, as the
		// pool's do, and so do the renewals.
		k.release(false)
		return nil, err
	}
	if k.conn == nil {
		c, err := k.db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		k.conn = c
	}
	return k.conn, nil
}

// dbClosed returns database/sql's error when db was closed, and nil
// otherwise. A Conn call whose ctx has ended tells it without taking a
// connection: db.Close does not end a connection a Conn holds.
func dbClosed(db *sql.DB) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, err := db.Conn(ctx)
	switch {
	case err == nil:
		_ = c.Close()
		return nil
	case errors.Is(err, context.Canceled):
		return nil
	}
	return err
}

// run runs fn on the kept connection (or the pool), and once more on a new
// connection when the kept one turned out broken. fn gets the target and
// prepare, which returns the statement text(n) prepared on it.
func (k *renewConn) run(ctx context.Context, fn func(t sqlTarget, prepare prepareFunc) error) error {
	if err := k.lock(ctx); err != nil {
		return err
	}
	defer k.unlock()
	for attempt := 0; ; attempt++ {
		t, err := k.target(ctx)
		if err != nil {
			return err
		}
		prepare := func(name string, n int, text func(int) string) (*sql.Stmt, error) {
			key := stmtKey{name, n}
			if s := k.stmts[key]; s != nil {
				return s, nil
			}
			s, err := t.PrepareContext(ctx, text(n))
			if err != nil {
				return nil, err
			}
			k.stmts[key] = s
			return s, nil
		}
		err = fn(t, prepare)
		if !k.own || !broken(err) {
			return err
		}
		// A broken connection goes even when ctx has ended: kept, it
		// would fail the next round too (seen in CI under load: rounds
		// that began past their deadline failed on it until the locks
		// were lost).
		k.drop()
		if attempt > 0 || ctx.Err() != nil {
			return err
		}
	}
}

// broken reports whether err says the connection is unusable.
func broken(err error) bool {
	return errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, gomysql.ErrInvalidConn) || errors.Is(err, sql.ErrConnDone)
}

// drop closes the kept connection and its statements; database/sql
// closes the connection rather than pooling it. Called with the slot held.
func (k *renewConn) drop() { k.release(true) }

// close gives the connection back to the pool and closes the statements,
// once the statement in flight, if any, returned.
func (k *renewConn) close() {
	k.sem <- struct{}{}
	defer k.unlock()
	k.done = true
	k.release(false)
}

// release closes the statements and the connection, discarded when
// broken. Called with the slot held.
func (k *renewConn) release(broken bool) {
	for key, s := range k.stmts {
		_ = s.Close()
		delete(k.stmts, key)
	}
	if k.conn != nil {
		if broken {
			discard(k.conn)
		}
		_ = k.conn.Close()
		k.conn = nil
	}
}
