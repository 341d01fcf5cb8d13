package mysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// recorder wraps the real go-sql-driver connector and records every statement
// the Locker executes with its arguments: tests count round trips with it and
// check that no client clock value is ever sent. It is the real client with
// a window on it, not a mock.
type recorder struct {
	mu    sync.Mutex
	execs []execution
}

// execution is one statement sent to the server.
type execution struct {
	at      time.Time
	query   string
	args    []driver.NamedValue
	prepare bool
	call    *callMark // the mark of the call that made it (see markCall), or nil
}

// callMark marks the statements of one call under test.
type callMark struct{ _ byte } // not zero-sized: every mark is a distinct pointer

type callMarkKey struct{}

// markCall returns ctx marked for one call: the recorder files every
// statement made with it, or with a ctx derived from it, under the mark.
// A test counts a call's own statements so, and not those that the
// Locker's goroutines (the named-lock holder, renewals) send meanwhile:
// a statement of the call that takes no ctx derived from the caller's
// could not end when the caller's ctx does, which the house rules forbid.
func markCall(ctx context.Context) (context.Context, *callMark) {
	m := new(callMark)
	return context.WithValue(ctx, callMarkKey{}, m), m
}

func (r *recorder) add(ctx context.Context, query string, args []driver.NamedValue, prepare bool) {
	m, _ := ctx.Value(callMarkKey{}).(*callMark)
	r.mu.Lock()
	r.execs = append(r.execs, execution{at: time.Now(), query: query, args: args, prepare: prepare, call: m})
	r.mu.Unlock()
}

// heads shortens statements for a failure message.
func heads(qs []string) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		if len(q) > 60 {
			q = q[:60] + "…"
		}
		out[i] = q
	}
	return out
}

// statementsOf returns the statements (not prepares) recorded so far
// that were made under m.
func (r *recorder) statementsOf(m *callMark) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var qs []string
	for _, e := range r.execs {
		if e.call == m && !e.prepare {
			qs = append(qs, e.query)
		}
	}
	return qs
}

// take returns the executions recorded so far and forgets them.
func (r *recorder) take() []execution {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.execs
	r.execs = nil
	return e
}

// count returns how many executions (not prepares) match the prefix.
func count(es []execution, prefix string) int {
	n := 0
	for _, e := range es {
		if !e.prepare && strings.HasPrefix(e.query, prefix) {
			n++
		}
	}
	return n
}

// openRecorded opens a GORM handle on cfg whose statements r records.
func openRecorded(t testing.TB, cfg *gomysql.Config, r *recorder) (*gorm.DB, *sql.DB) {
	t.Helper()
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("connector: %v", err)
	}
	sqlDB := sql.OpenDB(&recConnector{Connector: c, r: r})
	t.Cleanup(func() { _ = sqlDB.Close() })
	gdb, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: sqlDB, DSNConfig: cfg}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("gorm.Open: %v", err)
	}
	return gdb, sqlDB
}

type recConnector struct {
	driver.Connector
	r *recorder
}

func (c *recConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &recConn{Conn: conn, r: c.r}, nil
}

// recConn forwards to the go-sql-driver connection, recording statements.
type recConn struct {
	driver.Conn
	r *recorder
}

func (c *recConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.r.add(ctx, query, nil, true)
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &recStmt{Stmt: s, query: query, r: c.r}, nil
}

func (c *recConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	res, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	if err != driver.ErrSkip { // ErrSkip: database/sql prepares it instead
		c.r.add(ctx, query, args, false)
	}
	return res, err
}

func (c *recConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	if err != driver.ErrSkip {
		c.r.add(ctx, query, args, false)
	}
	return rows, err
}

func (c *recConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *recConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *recConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *recConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

func (c *recConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

type recStmt struct {
	driver.Stmt
	query string
	r     *recorder
}

func (s *recStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.r.add(ctx, s.query, args, false)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *recStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.r.add(ctx, s.query, args, false)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (s *recStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}
