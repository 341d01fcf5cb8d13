package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestTakeMarkedLosesToATransaction checks that a hold's attempt on a key
// marked SHARED (its one-statement take in the key's row, then its
// transaction) refuses when a transaction holds the key's row meanwhile,
// and decides after it: a transaction that grants a hold
// (with a limit of 1, never two holders), and one that frees the key for a
// plain lock (never a plain lock beside a hold). Each transaction waits,
// in the middle, until the take waits for a lock the transaction holds;
// the take reads without locks of its own (READ COMMITTED) unless it asks
// for them. Either may win the key.
func TestTakeMarkedLosesToATransaction(t *testing.T) {
	for _, plain := range []bool{false, true} {
		name := map[bool]string{false: "Grant", true: "PlainLock"}[plain]
		t.Run(name, func(t *testing.T) { takeMarkedRace(t, plain) })
	}
}

func takeMarkedRace(t *testing.T, plain bool) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	k := t.Name() + "-" + rand.Text()[:8]
	var started bool // the slow driver's transaction reached its write
	open := func(isolation string, hook func(query string)) *sql.DB { return hookedDB(t, isolation, hook) }
	// A table of the test's own, which no other test's rows, locks or DDL
	// touch.
	table := "take_marked_" + strings.ToLower(rand.Text()[:8])
	plainDB := open("", func(string) {})
	if err := migrate(ctx, plainDB, table); err != nil {
		t.Fatal(err)
	}
	if err := migrateShared(ctx, plainDB, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = plainDB.ExecContext(context.Background(), "DROP TABLE IF EXISTS `"+table+sharedSuffix+"`, `"+table+"`")
	})
	newDrv := func(db *sql.DB) *sqlDriver {
		return pollDriver(t, ctx, db, table, 30*time.Second)
	}
	share := driver.Share{Mode: driver.Permits, Limit: 1, Weight: 1}
	req := func() driver.Request { return driver.Request{Key: k, Owner: rand.Text(), TTL: 30 * time.Second} }
	fast := newDrv(open("'READ-COMMITTED'", func(string) {}))
	// The key is marked SHARED and has no hold.
	g, err := fast.TryAcquireShared(ctx, req(), share)
	if err != nil {
		t.Fatal(err)
	}
	if err := fast.Release(ctx, driver.Lease{Key: k, State: g.State}); err != nil {
		t.Fatal(err)
	}
	// The hold lived in the key's row, which its release freed: mark the
	// row, as the last of several holds leaves it.
	if _, err := plainDB.ExecContext(ctx, "UPDATE `"+table+"` SET task_status = '"+sharedStatus+"' WHERE task_name = ?", k); err != nil {
		t.Fatal(err)
	}
	monitor := open("", func(string) {})
	done := make(chan struct{})
	var fastGrant driver.Grant
	var fastErr error
	slow := newDrv(open("", func(q string) {
		// A grant: in the table of shared holds, or in the key's row.
		write := strings.HasPrefix(q, "REPLACE INTO") || strings.Contains(q, "SET version = ?, task_status = '"+soleStatus+"'")
		if plain {
			write = strings.Contains(q, "SET task_status = 'FINISH'") && strings.Contains(q, "task_status = '"+sharedStatus+"' AND NOT EXISTS") // settle
		}
		if !write || started {
			return
		}
		started = true
		go func() {
			defer close(done)
			fastGrant, fastErr = fast.TryAcquireShared(ctx, req(), share)
		}()
		// The take runs now, until it waits for a lock this transaction
		// holds, or it took or refused without waiting: the outcome tells.
		if !awaitLockWait(ctx, t, monitor, "%", done) {
			select {
			case <-done:
			default:
				t.Error("the take never waited for the transaction's locks")
			}
		}
	}))
	var slowErr error
	var slowToken uint64
	if plain {
		var g driver.Grant
		g, slowErr = slow.TryAcquire(ctx, req())
		slowToken = g.Token
	} else {
		var g driver.Grant
		g, slowErr = slow.TryAcquireShared(ctx, req(), share)
		slowToken = g.Token
	}
	if !started {
		t.Fatalf("the transaction never wrote: %v", slowErr)
	}
	<-done
	if slowErr == nil && fastErr == nil {
		what := map[bool]string{false: "a semaphore of 1 must never have two holders", true: "a key must never be a plain lock and a semaphore at once"}[plain]
		t.Fatalf("%s: the transaction's grant (token %d) and the take's (token %d) both hold", what, slowToken, fastGrant.Token)
	}
	// Either may win; the loser is refused.
	want := map[bool]error{false: driver.ErrHeld, true: driver.ErrConflict}[plain]
	for who, err := range map[string]error{"the transaction": slowErr, "the take": fastErr} {
		if err != nil && !errors.Is(err, want) {
			t.Errorf("%s: %v, want nil or %v", who, err, want)
		}
	}
}

// hookedDB opens the test database with hook on every connection (see
// hookConnector), at the isolation level given (empty: the server's).
func hookedDB(t *testing.T, isolation string, hook func(query string)) *sql.DB {
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

// logProcesses logs what the server's connections are doing, for a take
// that neither waited on InnoDB's locks nor finished.
func logProcesses(ctx context.Context, t *testing.T, db *sql.DB) {
	rows, err := db.QueryContext(ctx, "SELECT ID, COMMAND, TIME, IFNULL(STATE, ''), LEFT(IFNULL(INFO, ''), 160) FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Sleep'")
	if err != nil {
		t.Logf("read the process list: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, secs int64
		var command, state, info string
		if err := rows.Scan(&id, &command, &secs, &state, &info); err != nil {
			t.Logf("read the process list: %v", err)
			return
		}
		t.Logf("process %d: %s %ds state=%q %s", id, command, secs, state, info)
	}
}
