package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// TestCrashWhileStatementRuns: the harness's Crash returns while a
// statement of the crashed Locker still runs on the server, as a process
// that dies does not wait for its queries. Crash used to cut the Locker's
// proxy silently and then close its pool, which waits for the connection in
// use: the statement's reply never came, and Crash returned only when the
// call's ctx ended (31 s in WaiterCrash through PgBouncer, under load,
// where a waiter's statement queues for a server connection).
func TestCrashWhileStatementRuns(t *testing.T) {
	srv := testenv.Postgres(t)
	for _, tc := range []struct {
		name   string
		client client
	}{{"pool", viaPool}, {"sqldb", viaDB}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, srv.URL(), tc.client, postgres.Config{Table: "crash_" + tc.name + "_locks"})
			h := f.harness()
			l := h.NewLocker(t)
			defer l.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			// The table exists once a lock was taken.
			lk, err := l.TryLock(ctx, freshKey(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}

			// A transaction of the test's own locks the table, so that the
			// Locker's next statement waits on the server.
			tx, err := f.admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			if _, err := tx.Exec(ctx, `LOCK TABLE "`+f.table()+`" IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			tried := make(chan error, 1)
			go func() {
				_, err := l.TryLock(ctx, freshKey(t))
				tried <- err
			}()
			for !waitsOnLock(ctx, srv, f.table()) {
				if ctx.Err() != nil {
					t.Fatal("the Locker's statement never waited for the table lock")
				}
				time.Sleep(10 * time.Millisecond)
			}

			crashed := make(chan struct{})
			go func() {
				defer close(crashed)
				h.Crash(t, l)
			}()
			select {
			case <-crashed:
			case <-time.After(15 * time.Second):
				t.Errorf("Crash still running 15 s after it was called, while a statement of the crashed Locker waited on the server")
				cancel() // ends the statement's wait, and Crash
				<-crashed
			}
			_ = tx.Rollback(ctx)
			if err := <-tried; err == nil {
				t.Errorf("the crashed Locker's TryLock returned a lock")
			}
		})
	}
}

// waitsOnLock reports whether a session of srv waits for a lock in a
// statement that names table.
func waitsOnLock(ctx context.Context, srv *testenv.PostgresServer, table string) bool {
	act, err := srv.Activity(ctx)
	if err != nil {
		return false
	}
	for line := range strings.Lines(act) {
		if strings.Contains(line, "wait_event_type=Lock ") && strings.Contains(line, table) {
			return true
		}
	}
	return false
}
