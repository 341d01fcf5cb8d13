package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestInTxEndsSilentClient checks the bound on a transaction on shared
// holds whose client falls silent (cut off): the server ends its session
// after idle seconds, so that it keeps no row lock longer; and a
// transaction that ends normally gives the session its own wait_timeout
// and innodb_lock_wait_timeout back.
func TestInTxEndsSilentClient(t *testing.T) {
	db, ctx := openTestDB(t)
	db.SetMaxOpenConns(1) // one session, reused by every call
	session := func() (wait, lockWait int64) {
		t.Helper()
		if err := db.QueryRowContext(ctx, "SELECT @@session.wait_timeout, @@session.innodb_lock_wait_timeout").Scan(&wait, &lockWait); err != nil {
			t.Fatal(err)
		}
		return wait, lockWait
	}
	wait, lockWait := session()
	d := newDriver(db, Config{}, 0)
	if err := d.inTx(ctx, 1, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if w, lw := session(); w != wait || lw != lockWait {
		t.Errorf("after a transaction on shared holds the session must have its own timeouts back: wait_timeout %d, innodb_lock_wait_timeout %d; want %d, %d", w, lw, wait, lockWait)
	}
	err := d.inTx(ctx, 1, func(tx *sql.Tx) error {
		time.Sleep(3 * time.Second) // silent for three times the bound
		var one int
		return tx.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	})
	if err == nil {
		t.Fatal("a transaction on shared holds whose client stays silent for longer than its bound must be ended by the server: it went on")
	}
	if w, lw := session(); w != wait || lw != lockWait {
		t.Errorf("the next session must have its own timeouts: wait_timeout %d, innodb_lock_wait_timeout %d; want %d, %d", w, lw, wait, lockWait)
	}
}

// TestInTxIsolation checks that a transaction on shared holds runs READ
// COMMITTED, and that the session gets its own isolation level back.
func TestInTxIsolation(t *testing.T) {
	db, ctx := openTestDB(t)
	db.SetMaxOpenConns(1) // one session, reused by every call
	srv, err := serverInfo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(db, Config{}, 0)
	d.isolationVar = "transaction_isolation"
	if srv.mariaDB {
		d.isolationVar = "tx_isolation"
	}
	level := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) string {
		t.Helper()
		var l string
		if err := q.QueryRowContext(ctx, "SELECT @@session."+d.isolationVar).Scan(&l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	if _, err := db.ExecContext(ctx, "SET @@session."+d.isolationVar+" = 'SERIALIZABLE'"); err != nil {
		t.Fatal(err)
	}
	var inside string
	if err := d.inTx(ctx, 1, func(tx *sql.Tx) error { inside = level(tx); return nil }); err != nil {
		t.Fatal(err)
	}
	if inside != "READ-COMMITTED" {
		t.Errorf("a transaction on shared holds must run READ COMMITTED: %s", inside)
	}
	if l := level(db); l != "SERIALIZABLE" {
		t.Errorf("after a transaction on shared holds the session must have its own isolation level back: %s", l)
	}
}

// openTestDB opens the test database, closed at the end of the test, and
// returns it with a ctx that bounds the test.
func openTestDB(t *testing.T) (*sql.DB, context.Context) {
	t.Helper()
	db, err := sql.Open("mysql", os.Getenv(storeenv.MySQLDSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return db, ctx
}

// pollDriver returns a poll-only driver on table of db, configured with
// ttl, closed when the test ends.
func pollDriver(t *testing.T, ctx context.Context, db *sql.DB, table string, ttl time.Duration) *sqlDriver {
	t.Helper()
	d := newDriver(db, Config{PollOnly: true, Table: table}, 0)
	if err := d.Configure(ctx, driver.Config{TTL: ttl, Logger: slog.New(slog.DiscardHandler), Backoff: func(int) time.Duration { return 10 * time.Millisecond }}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestSharedAttemptOutlivesEndedSession checks that a shared attempt
// whose session the server ended in the middle of its transaction (the
// client silent for longer than the transaction's wait_timeout, as on a
// loaded machine) tries again on another connection: the transaction was
// rolled back, so nothing of it was done, and a one-shot attempt on a key
// with room must not fail with the broken connection's error.
func TestSharedAttemptOutlivesEndedSession(t *testing.T) {
	d, ctx, req, permit := keyWithPermit(t)
	stalls := 0
	d.txStall = func(*sql.Tx) error {
		if stalls++; stalls == 1 {
			time.Sleep(3 * time.Second) // silent for three times txIdle
		}
		return nil
	}
	r := req()
	r.TTL = 3 * time.Second // txIdle: one second
	g, err := d.TryAcquireShared(ctx, r, permit)
	if err != nil {
		t.Fatalf("a shared attempt whose session the server ended before its commit must try again, not fail: %v", err)
	}
	if stalls < 2 {
		t.Fatalf("the attempt was granted after its session ended without a second transaction (%d)", stalls)
	}
	if err := d.Release(ctx, driver.Lease{Key: r.Key, State: g.State}); err != nil {
		t.Fatal(err)
	}
}

// TestSharedAttemptBrokenEveryTime checks that a shared attempt whose
// connection breaks before the commit in every try reports a store error
// without a residue to undo (nothing was done), not a key found held.
func TestSharedAttemptBrokenEveryTime(t *testing.T) {
	d, ctx, req, permit := keyWithPermit(t)
	tries := 0
	d.txStall = func(*sql.Tx) error { tries++; return gomysql.ErrInvalidConn }
	_, err := d.TryAcquireShared(ctx, req(), permit)
	switch {
	case err == nil:
		t.Fatal("an attempt whose connection broke in every try was granted")
	case errors.Is(err, driver.ErrHeld):
		t.Fatalf("an attempt whose connection broke in every try reports the key held: %v", err)
	case !errors.Is(err, gomysql.ErrInvalidConn):
		t.Fatalf("the error does not name the broken connection: %v", err)
	}
	var r *driver.Residue
	if errors.As(err, &r) {
		t.Errorf("a transaction rolled back before its commit left a residue to undo: %v", err)
	}
	if tries < 2 {
		t.Errorf("%d tries: a transaction rolled back before its commit was not tried again", tries)
	}
}

// TestTxOutlivesEndedSession checks, for each kind of transaction on
// shared holds besides an attempt (an undo, a break, a settling as a plain
// acquisition runs it, a new limit), that one whose session ended before
// its commit (here: killed by another session, as the server ends one
// silent for longer than its wait_timeout) runs again on another
// connection: it was rolled back, so nothing of it was done, and the call
// must not fail with the broken connection's error.
func TestTxOutlivesEndedSession(t *testing.T) {
	permit := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1}
	for _, c := range []struct {
		name string
		// run is the call, on key held by two permits of owners.
		run func(ctx context.Context, d *sqlDriver, key string, owners []string) error
	}{
		{"Undo", func(ctx context.Context, d *sqlDriver, key string, owners []string) error {
			return d.undoShare(ctx, key, owners[1])
		}},
		{"Break", func(ctx context.Context, d *sqlDriver, key string, _ []string) error {
			return d.breakShared(ctx, key)
		}},
		{"Settle", func(ctx context.Context, d *sqlDriver, key string, owners []string) error {
			for _, o := range owners {
				if err := d.leave(ctx, key, o, 0); err != nil && !errors.Is(err, driver.ErrNotHeld) {
					return err
				}
			}
			if _, err := d.db.ExecContext(ctx, "DELETE FROM "+DefaultTable+sharedSuffix+" WHERE task_name = ?", key); err != nil {
				return err
			}
			free, err := d.settleShared(ctx, key, 1)
			if err == nil && !free {
				err = errors.New("a key with no shared hold left was not settled free")
			}
			return err
		}},
		{"SetLimit", func(ctx context.Context, d *sqlDriver, key string, _ []string) error {
			return d.SetLimit(ctx, key, 3)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, ctx := openTestDB(t)
			d := soleDriver(t, db)
			key, req, _ := freeKey(t, d)
			var owners []string
			for range 2 {
				r := req()
				if _, err := d.TryAcquireShared(ctx, r, permit); err != nil {
					t.Fatal(err)
				}
				owners = append(owners, r.Owner)
			}
			stalls := 0
			d.txStall = func(tx *sql.Tx) error {
				if stalls++; stalls == 1 {
					return killSession(ctx, db, tx)
				}
				return nil
			}
			if err := c.run(ctx, d, key, owners); err != nil {
				t.Fatalf("a transaction whose session ended before its commit must run again, not fail: %v", err)
			}
			if stalls < 2 {
				t.Fatalf("the transaction succeeded after its session ended without a second one (%d)", stalls)
			}
		})
	}
}

// killSession ends the session of tx from another session, as the server
// ends one silent for longer than its wait_timeout, and waits until it is
// gone.
func killSession(ctx context.Context, db *sql.DB, tx *sql.Tx) error {
	var id int64
	if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		return err
	}
	for {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil || n == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestInTxBrokenCommitNotRetried checks that a transaction on shared holds
// whose connection broke when its commit was due is neither run again nor
// reported as rolled back: the commit may have reached the server, so its
// outcome is unknown.
func TestInTxBrokenCommitNotRetried(t *testing.T) {
	db, ctx := openTestDB(t)
	d := newDriver(db, Config{}, 0)
	t.Cleanup(func() { _ = d.Close() })
	runs := 0
	err := d.inTx(ctx, 5, func(tx *sql.Tx) error {
		runs++
		return killSession(ctx, db, tx)
	})
	switch {
	case err == nil:
		t.Fatal("a commit on a connection that broke succeeded")
	case errors.Is(err, errRolledBack) || definite(err):
		t.Errorf("a commit whose connection broke counts as rolled back: %v", err)
	}
	if runs != 1 {
		t.Errorf("a transaction whose commit met a broken connection ran %d times; want 1", runs)
	}
}

// keyWithPermit returns a driver, a key's requests and a permit of a
// semaphore of 2 on it, of which one permit is held: the next attempt
// runs a transaction on the key's existing rows.
func keyWithPermit(t *testing.T) (*sqlDriver, context.Context, func() driver.Request, driver.Share) {
	t.Helper()
	db, ctx := openTestDB(t)
	d := soleDriver(t, db)
	_, req, _ := freeKey(t, d)
	permit := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1}
	if _, err := d.TryAcquireShared(ctx, req(), permit); err != nil {
		t.Fatal(err)
	}
	return d, ctx, req, permit
}
