package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// closeTimeout bounds the goodbye to a dropped renewal connection.
const closeTimeout = time.Second

// keptConn is the connection a Locker keeps for its renewals, so that a
// renewal round never waits for a connection from the caller's pool: the
// caller's own queries may hold every pooled connection for longer than a
// lock's validity, or a pool may have to open one, and a connect under load
// can outlast the lock. Every statement it runs must be safe to run twice
// (renewals are): after a connection broke in the middle of one, the
// statement runs again on a new connection, within the same call.
type keptConn struct {
	// open makes the connection: on a *pgxpool.Pool, a connection of its
	// own with the pool's settings and hooks; on a *sql.DB, one taken
	// from its pool.
	open func(ctx context.Context) (keptSession, error)
	// maxAge and maxIdle, when positive, replace the connection before a
	// statement once it is older, or idle for longer (the pool's
	// MaxConnLifetime and MaxConnIdleTime).
	maxAge, maxIdle time.Duration
	// closed serves the statements after close.
	closed runner
	// atNew makes warm open the connection; otherwise the first renewal
	// opens it.
	atNew bool

	sem  chan struct{} // one slot: held while a statement uses conn
	conn keptSession   // nil before the first use, after a failure and after close
	born time.Time     // when conn was opened
	used time.Time     // when conn last ran a statement
	done bool          // close ran
}

// keptSession is one open connection of a keptConn.
type keptSession interface {
	runner
	close()
}

func newKeptConn(open func(ctx context.Context) (keptSession, error), closed runner, maxAge, maxIdle time.Duration, atNew bool) *keptConn {
	return &keptConn{open: open, closed: closed, maxAge: maxAge, maxIdle: maxIdle, atNew: atNew, sem: make(chan struct{}, 1)}
}

// poolKeptConn keeps a connection of its own beside pool, made as pool
// makes its connections; it honours pool's MaxConnLifetime and
// MaxConnIdleTime. The first renewal opens it: a connect, never a wait
// for the pool. Opened in New, it made TestConformancePgBouncer fail
// (statements of other Lockers cancelled through PgBouncer, 57014 and
// 08P01 "successfully sent cancel request"), for a reason not found.
func poolKeptConn(pool *pgxpool.Pool) *keptConn {
	cfg := pool.Config()
	return newKeptConn(func(ctx context.Context) (keptSession, error) {
		c, err := connectLike(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return pgxSession{pgxRunner{c}, c}, nil
	}, pgxRunner{pool}, cfg.MaxConnLifetime, cfg.MaxConnIdleTime, false)
}

// dbKeptConn keeps one connection of db, taken in New: taken at the first
// renewal, it could wait behind the caller's queries for a free one.
// database/sql does not tell its SetConnMaxLifetime or
// SetConnMaxIdleTime, so the connection is kept until a statement on it
// fails.
func dbKeptConn(db *sql.DB) *keptConn {
	return newKeptConn(func(ctx context.Context) (keptSession, error) {
		c, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		return sqlSession{sqlRunner{c}, c}, nil
	}, newDBQuerier(db), 0, 0, true)
}

// connectLike opens one connection outside pool with pool's configuration
// cfg, running its BeforeConnect and AfterConnect hooks as the pool does
// (credentials that change, a search_path, registered types).
func connectLike(ctx context.Context, cfg *pgxpool.Config) (*pgx.Conn, error) {
	cc := cfg.ConnConfig.Copy()
	if cfg.BeforeConnect != nil {
		if err := cfg.BeforeConnect(ctx, cc); err != nil {
			return nil, err
		}
	}
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	if cfg.AfterConnect != nil {
		if err := cfg.AfterConnect(ctx, c); err != nil {
			closeConn(c)
			return nil, err
		}
	}
	return c, nil
}

// closeConn closes c, bounded by closeTimeout.
func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = c.Close(ctx)
}

type pgxSession struct {
	pgxRunner
	c *pgx.Conn
}

func (s pgxSession) close() { closeConn(s.c) }

type sqlSession struct {
	sqlRunner
	c *sql.Conn
}

// close gives the connection back to db, which discards it when broken.
func (s sqlSession) close() { _ = s.c.Close() }

// query runs a statement on the kept connection, opening one first when
// there is none or the one kept is too old. A statement that meets a
// broken connection, one that had been kept, runs once more on a new one.
// Calls wait for each other, until their ctx ends: an Extend beside a
// round waits for the round's statement rather than for the pool.
func (k *keptConn) query(ctx context.Context, sql string, args []any, row func(scan func(dest ...any) error) error) error {
	if err := k.lock(ctx); err != nil {
		return err
	}
	defer k.unlock()
	if k.done {
		return k.closed.query(ctx, sql, args, row)
	}
	for {
		fresh, err := k.ensure(ctx)
		if err != nil {
			return err
		}
		err = k.conn.query(ctx, sql, args, row)
		k.used = time.Now()
		if err == nil || !brokenConn(err) {
			return err
		}
		k.drop()
		if fresh || ctx.Err() != nil {
			return err
		}
	}
}

// ensure opens the connection when there is none or the one kept is too
// old (k.sem held), and reports whether it opened one.
func (k *keptConn) ensure(ctx context.Context) (bool, error) {
	now := time.Now()
	if k.conn != nil && (k.maxAge > 0 && now.Sub(k.born) > k.maxAge || k.maxIdle > 0 && now.Sub(k.used) > k.maxIdle) {
		k.drop()
	}
	if k.conn != nil {
		return false, nil
	}
	c, err := k.open(ctx)
	if err != nil {
		return false, err
	}
	k.conn, k.born, k.used = c, now, now
	return true, nil
}

// warm opens the connection now when k.atNew, so that a lock's first
// renewal needs no connect and no free connection of the pool.
func (k *keptConn) warm(ctx context.Context) error {
	if !k.atNew {
		return nil
	}
	if err := k.lock(ctx); err != nil {
		return err
	}
	defer k.unlock()
	if k.done {
		return nil
	}
	_, err := k.ensure(ctx)
	return err
}

// drop closes the connection.
func (k *keptConn) drop() {
	k.conn.close()
	k.conn = nil
}

// brokenConn reports whether err may have left the connection unusable:
// any error but the server's answer to the statement, and the server's
// notice that it ends the session (class 57P: an administrator's command,
// a shutdown, pg_terminate_backend; class 08: a connection exception).
func brokenConn(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "57P") || strings.HasPrefix(pe.Code, "08")
	}
	return true
}

// lock takes the connection for one caller, or returns ctx's error when
// ctx ends first.
func (k *keptConn) lock(ctx context.Context) error {
	select {
	case k.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *keptConn) unlock() { <-k.sem }

// close closes the connection (on a *sql.DB gives it back); later
// statements run on the pool.
func (k *keptConn) close() {
	_ = k.lock(context.Background())
	defer k.unlock()
	k.done = true
	if k.conn != nil {
		k.drop()
	}
}
