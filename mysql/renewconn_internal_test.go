package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker/internal/storeenv"
)

// TestRenewConnReconnectsAtOnce: the server ends the renewal connection
// (KILL, as a restart or wait_timeout would); the next statement must not
// fail for it: it runs again on a new connection within the same call,
// rather than leave the renewal to the engine's retry, or keep a broken
// connection for good.
func TestRenewConnReconnectsAtOnce(t *testing.T) {
	dsn := os.Getenv(storeenv.MySQLDSN)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	open := func() *sql.DB {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	admin, db := open(), open()
	k := newRenewConn(db)
	defer k.close()
	if err := k.open(ctx); err != nil {
		t.Fatal(err)
	}
	id := func() (id int64, err error) {
		err = k.run(ctx, func(on sqlTarget, _ prepareFunc) error {
			return on.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
		})
		return id, err
	}
	first, err := id()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", first)); err != nil {
			t.Fatal(err)
		}
		next, err := id()
		if err != nil {
			t.Fatalf("a statement after the server ended the renewal connection must reconnect, not fail (round %d): %v", i, err)
		}
		if next == first {
			t.Fatalf("the renewal connection %d answered after it was killed", next)
		}
		first = next
	}
}

// TestRenewConnDropsBrokenAfterCtx: the server ends the renewal connection,
// and the statement that finds it broken runs under a ctx that has ended
// (a round that began past its deadline): the connection must go all the
// same, not stay for the next round to fail on.
func TestRenewConnDropsBrokenAfterCtx(t *testing.T) {
	dsn := os.Getenv(storeenv.MySQLDSN)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k := newRenewConn(db)
	defer k.close()
	var id int64
	if err := k.run(ctx, func(on sqlTarget, _ prepareFunc) error {
		return on.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		t.Fatal(err)
	}
	ended, end := context.WithCancel(ctx)
	err = k.run(ended, func(on sqlTarget, _ prepareFunc) error {
		end()
		_, err := on.ExecContext(ctx, "DO 1")
		return err
	})
	if !broken(err) {
		t.Fatalf("a statement on the killed connection: got %v, want a broken connection's error", err)
	}
	if k.conn != nil {
		t.Fatalf("the broken renewal connection was kept because the statement's ctx had ended")
	}
}

// TestRenewConnEndsWithTheDB: once the caller closed its *sql.DB, the
// renewal connection, which db.Close leaves open, must end too, and the
// renewals fail as on a closed pool ("sql: database is closed", which
// classify makes permanent): a Locker whose caller closed its pool kept
// renewing its locks for good.
func TestRenewConnEndsWithTheDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", os.Getenv(storeenv.MySQLDSN))
	if err != nil {
		t.Fatal(err)
	}
	k := newRenewConn(db)
	defer k.close()
	ping := func() error {
		return k.run(ctx, func(on sqlTarget, _ prepareFunc) error {
			_, err := on.ExecContext(ctx, "DO 1")
			return err
		})
	}
	if err := ping(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	err = ping()
	if err == nil || !strings.Contains(err.Error(), "sql: database is closed") {
		t.Fatalf("a statement after the caller closed its pool: got %v, want sql: database is closed", err)
	}
	if k.conn != nil {
		t.Errorf("the renewal connection is still open after the caller closed its pool")
	}
}
