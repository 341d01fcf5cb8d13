package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestTakeFirstLosesToAnEarlierDecision checks that a first holder's
// two-statement take refuses when a transaction decided on the key's rows
// before the take's row was there, and granted after: with a limit of 1,
// never two holders. The transaction's grant waits, on its connection,
// until the take's row is in; the take reads without locks (READ
// COMMITTED).
func TestTakeFirstLosesToAnEarlierDecision(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	k := t.Name() + "-" + rand.Text()[:8]
	inserted := make(chan struct{}) // the take's row is in
	var started, armed bool         // the slow driver's grant began; the take watched
	open := func(isolation string, hook func(query string)) *sql.DB {
		cfg, err := gomysql.ParseDSN(os.Getenv(storeenv.MySQLDSN))
		if err != nil {
			t.Fatal(err)
		}
		if isolation != "" {
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params["tx_isolation"] = isolation
		}
		c, err := gomysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(hookConnector{Connector: c, hook: hook})
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	newDrv := func(db *sql.DB) *sqlDriver {
		d := newDriver(db, Config{PollOnly: true, Table: DefaultTable}, 0)
		if err := d.Configure(ctx, driver.Config{TTL: 10 * time.Second, Logger: slog.New(slog.DiscardHandler), Backoff: func(int) time.Duration { return 10 * time.Millisecond }}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	fast := newDrv(open("'READ-COMMITTED'", func(q string) {
		// The take's second statement: its row is in.
		if strings.HasPrefix(q, "UPDATE") && strings.Contains(q, "task_status <> 'RUNNING'") && armed {
			armed = false
			close(inserted)
		}
	}))
	if !fast.mariaDB {
		t.Skip("the two-statement take runs on MariaDB only")
	}
	done := make(chan struct{})
	var fastGrant driver.Grant
	var fastErr error
	slow := newDrv(open("", func(q string) {
		// The transaction's grant (coverShare), after it read no row:
		// the take runs now, up to its second statement.
		if strings.Contains(q, "version = version + 1, task_status = 'SHARED'") && !strings.Contains(q, "task_status <> 'RUNNING'") && !started {
			started, armed = true, true
			go func() {
				defer close(done)
				fastGrant, fastErr = fast.TryAcquireShared(ctx, driver.Request{Key: k, Owner: rand.Text(), TTL: 10 * time.Second}, driver.Share{Mode: driver.Permits, Limit: 1, Weight: 1})
			}()
			select {
			case <-inserted:
			case <-time.After(10 * time.Second):
				t.Error("the take did not reach its second statement: its first took nothing")
			}
		}
	}))
	slow.mariaDB = false // the transaction, as on MySQL
	// The key's row exists and is free, so that the take's first
	// statement applies.
	if _, err := slow.db.ExecContext(ctx, "INSERT INTO "+slow.sql.table+" (task_name, task_status, version, owner_token, owner_label, lock_until, update_time)"+
		" VALUES (?, 'FINISH', "+epochMicros+", '', '', "+dbNow+", "+dbNow+")", k); err != nil {
		t.Fatal(err)
	}
	_, slowErr := slow.TryAcquireShared(ctx, driver.Request{Key: k, Owner: rand.Text(), TTL: 10 * time.Second}, driver.Share{Mode: driver.Permits, Limit: 1, Weight: 1})
	if !started {
		t.Fatalf("the transaction never granted: %v", slowErr)
	}
	<-done
	if slowErr == nil && fastErr == nil {
		t.Fatalf("a semaphore of 1 must never have two holders: the transaction's grant and the take's (token %d) both hold", fastGrant.Token)
	}
	if fastErr != nil && !errors.Is(fastErr, driver.ErrHeld) {
		t.Errorf("the take after the transaction's grant: %v, want ErrHeld", fastErr)
	}
}

// hookConnector is a connector of the real driver whose connections call
// hook with the text of each statement they prepare or run, before they
// run it.
type hookConnector struct {
	sqldriver.Connector
	hook func(query string)
}

func (c hookConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &hookConn{Conn: conn, hook: c.hook}, nil
}

type hookConn struct {
	sqldriver.Conn
	hook func(query string)
}

func (c *hookConn) PrepareContext(ctx context.Context, query string) (sqldriver.Stmt, error) {
	s, err := c.Conn.(sqldriver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &hookStmt{Stmt: s, query: query, hook: c.hook}, nil
}

func (c *hookConn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	return c.Conn.(sqldriver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *hookConn) ExecContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	c.hook(query)
	return c.Conn.(sqldriver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *hookConn) QueryContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	return c.Conn.(sqldriver.QueryerContext).QueryContext(ctx, query, args)
}

type hookStmt struct {
	sqldriver.Stmt
	query string
	hook  func(query string)
}

func (s *hookStmt) ExecContext(ctx context.Context, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	s.hook(s.query)
	res, err := s.Stmt.(sqldriver.StmtExecContext).ExecContext(ctx, args)
	return res, err
}

func (s *hookStmt) QueryContext(ctx context.Context, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	return s.Stmt.(sqldriver.StmtQueryContext).QueryContext(ctx, args)
}
