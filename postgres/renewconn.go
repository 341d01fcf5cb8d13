package postgres

import (
	"context"
	"database/sql"
	"sync"
)

// keptConn is one connection of a *sql.DB that the Locker keeps for its
// renewals: a renewal round then needs no connection from the pool, whose
// idle connections database/sql closes past MaxIdleConns (2 by default),
// so that a renewal after a burst of acquisitions had to open one, and
// the connect could outlast the lock's validity on a loaded machine.
type keptConn struct {
	db *sql.DB

	mu     sync.Mutex // held while a statement uses conn
	conn   *sql.Conn  // nil until the first renewal, and after a failure
	closed bool
}

// query runs a statement on the kept connection, taking one from the pool
// first when there is none. While another renewal uses it (an Extend
// beside a round), the statement runs on the pool. A failed statement
// drops the connection, which may be broken; the next renewal takes
// another.
func (k *keptConn) query(ctx context.Context, sql string, args []any, row func(scan func(dest ...any) error) error) error {
	if !k.mu.TryLock() {
		return sqlRunner{k.db}.query(ctx, sql, args, row)
	}
	defer k.mu.Unlock()
	if k.closed {
		return sqlRunner{k.db}.query(ctx, sql, args, row)
	}
	if k.conn == nil {
		c, err := k.db.Conn(ctx)
		if err != nil {
			return err
		}
		k.conn = c
	}
	err := sqlRunner{k.conn}.query(ctx, sql, args, row)
	if err != nil {
		_ = k.conn.Close()
		k.conn = nil
	}
	return err
}

// close gives the connection back to the pool.
func (k *keptConn) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.conn != nil {
		_ = k.conn.Close()
		k.conn = nil
	}
}
