package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

// TestInsertOfEndedSessionLeavesResidue: the server ends the session of a
// TryAcquire's insert while the insert is on the server (KILL CONNECTION,
// as the conformance List case saw under load: "insert: invalid
// connection" after "unexpected EOF"). go-sql-driver then knows the
// statement was sent, not whether it ran, so the attempt must answer a
// store error carrying a Residue: not a refusal, not a grant, and no retry
// that would find its own row held. The insert waits for a gap lock of
// another transaction, so that the kill finds it on the server; it ran
// nothing there, so the Residue finds nothing to undo, and the key is free.
func TestInsertOfEndedSessionLeavesResidue(t *testing.T) {
	db, ctx := openTestDB(t)
	db.SetMaxOpenConns(1) // the insert runs on the connection whose id the hook reads
	admin, _ := openTestDB(t)
	const ttl = 2 * time.Second
	d := pollDriver(t, ctx, db, DefaultTable, ttl)
	req := driver.Request{Key: t.Name() + "-" + rand.Text(), Owner: rand.Text(), TTL: ttl}

	var gap *sql.Tx
	killed := make(chan error, 1)
	d.execErr = func(what string) error {
		if what != "insert" || gap != nil {
			return nil
		}
		var id int64
		if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			return err
		}
		// A locking read of the missing key at REPEATABLE READ holds the
		// gap that the insert needs.
		var err error
		if gap, err = admin.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead}); err != nil {
			return err
		}
		var n int
		if err := gap.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+DefaultTable+" WHERE task_name = ? FOR UPDATE", req.Key).Scan(&n); err != nil {
			return err
		}
		go func() { killed <- killWhenWaiting(ctx, admin, id) }()
		return nil
	}
	_, err := d.TryAcquire(ctx, req)
	if kerr := <-killed; kerr != nil {
		t.Fatalf("killing the insert's session: %v", kerr)
	}
	if gap != nil {
		_ = gap.Rollback()
	}
	if err == nil {
		t.Fatal("TryAcquire returned a grant whose insert's session was killed before it answered")
	}
	if !errors.Is(err, gomysql.ErrInvalidConn) {
		t.Fatalf("TryAcquire = %v; want go-sql-driver's invalid connection, the error of a statement sent on a session that ended", err)
	}
	if errors.Is(err, driver.ErrHeld) {
		t.Errorf("TryAcquire = %v; a statement of unknown outcome is no refusal", err)
	}
	var r *driver.Residue
	if !errors.As(err, &r) || r.Cleanup == nil {
		t.Fatalf("TryAcquire = %v; want a Residue that undoes the insert, whose outcome is unknown", err)
	}
	if err := r.Cleanup(ctx); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the Residue's cleanup: %v", err)
	}
	next := driver.Request{Key: req.Key, Owner: rand.Text(), TTL: ttl}
	g, err := d.TryAcquire(ctx, next)
	if err != nil {
		t.Fatalf("TryAcquire after the killed insert was cleaned up: %v", err)
	}
	if err := d.Release(ctx, driver.Lease{Key: next.Key, Owner: next.Owner, Token: g.Token, TTL: ttl, State: g.State}); err != nil {
		t.Fatal(err)
	}
}

// killWhenWaiting ends session id with KILL CONNECTION once it runs an
// INSERT (found in information_schema.PROCESSLIST).
func killWhenWaiting(ctx context.Context, admin *sql.DB, id int64) error {
	for {
		var n int
		err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'INSERT%'", id).Scan(&n)
		if err != nil {
			return err
		}
		if n > 0 {
			_, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
