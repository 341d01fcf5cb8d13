package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

// TestSoleHoldOutlivesDeadlock checks that the release, the keep and the
// move of a shared hold in its key's row run again when InnoDB picks them
// as a deadlock's victim. The deadlock is the one an attempt that created
// the key's row in its transaction made: its INSERT IGNORE of the row,
// which another attempt had created meanwhile, took a shared lock; the
// release (keep, move) waited for it; the attempt's next UPDATE of the row
// upgraded it. Here a transaction of the test plays that attempt, with
// rows of its own written first, so that InnoDB rolls the other side
// back.
func TestSoleHoldOutlivesDeadlock(t *testing.T) {
	permit := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1}
	for _, tc := range []struct {
		name string
		// op runs the statement; lockRow makes the attempt lock the
		// key's row first, before op or, when op calls it, at once.
		op func(ctx context.Context, d *sqlDriver, k string, hold driver.Grant, lockRow func()) error
	}{
		{"Release", func(ctx context.Context, d *sqlDriver, k string, hold driver.Grant, _ func()) error {
			return d.Release(ctx, driver.Lease{Key: k, State: hold.State})
		}},
		{"Keep", func(ctx context.Context, d *sqlDriver, k string, hold driver.Grant, _ func()) error {
			return d.Keep(ctx, driver.Lease{Key: k, State: hold.State}, time.Second)
		}},
		{"Move", func(ctx context.Context, d *sqlDriver, k string, _ driver.Grant, lockRow func()) error {
			// A second permit moves the first out of the key's row. The
			// attempt locks the row just before the move's UPDATE: the
			// second permit's own statements on the row would wait for
			// it earlier, and lose the deadlock where a lost deadlock
			// always ran again.
			var once sync.Once
			db := hookedDB(t, "", func(q string) {
				if strings.Contains(q, " AS k JOIN ") { // moveSole's move
					once.Do(lockRow)
				}
			})
			n := newDriver(db, Config{PollOnly: true, Table: DefaultTable}, 0)
			if err := n.Configure(ctx, driver.Config{TTL: 30 * time.Second, Logger: slog.New(slog.DiscardHandler), Backoff: func(int) time.Duration { return 10 * time.Millisecond }}); err != nil {
				return err
			}
			defer n.Close()
			_, err := n.TryAcquireShared(ctx, driver.Request{Key: k, Owner: rand.Text(), TTL: 30 * time.Second}, permit)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, ctx := openTestDB(t)
			d := soleDriver(t, db)
			k, req, _ := freeKey(t, d)
			hold, err := d.TryAcquireShared(ctx, req(), permit)
			if err != nil {
				t.Fatal(err)
			}
			if !hold.State.(*shareState).inRow {
				t.Fatal("the first permit of a free key must live in the key's row")
			}
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			locked := make(chan error, 1)
			lockRow := func() {
				// InnoDB rolls back the transaction that wrote less.
				for i := range 32 {
					if _, err := tx.ExecContext(ctx, "INSERT INTO "+d.sql.table+
						" (task_name, task_status, version, owner_token, owner_label, lock_until, update_time)"+
						" VALUES (?, 'FINISH', 1, '', '', "+dbNow+", "+dbNow+")", fmt.Sprintf("%s-pad-%d", k, i)); err != nil {
						locked <- fmt.Errorf("write the transaction's own rows: %w", err)
						return
					}
				}
				_, err := tx.ExecContext(ctx, "INSERT IGNORE INTO "+d.sql.table+
					" (task_name, task_status, version, owner_token, owner_label, lock_until, update_time)"+
					" VALUES (?, 'FINISH', "+epochMicros+", '', '', "+dbNow+", "+dbNow+")", k)
				locked <- err
			}
			done := make(chan error, 1)
			if tc.name == "Move" {
				go func() { done <- tc.op(ctx, d, k, hold, lockRow) }()
			} else {
				lockRow()
				go func() { done <- tc.op(ctx, d, k, hold, nil) }()
			}
			select {
			case err := <-locked:
				if err != nil {
					t.Fatalf("the attempt's lock of the key's row: %v", err)
				}
			case err := <-done:
				t.Fatalf("the %s ended before the attempt locked the key's row: %v", tc.name, err)
			}
			monitor, _ := openTestDB(t)
			if !awaitLockWait(ctx, t, monitor, "UPDATE%", done) {
				t.Fatalf("the %s never waited for the attempt's lock of the key's row: %v", tc.name, <-done)
			}
			_, err = tx.ExecContext(ctx, "UPDATE "+d.sql.table+" SET update_time = "+dbNow+" WHERE task_name = ?", k)
			var me *gomysql.MySQLError
			if errors.As(err, &me) && me.Number == 1213 {
				t.Fatal("InnoDB rolled the attempt back, not the other side: the test did not make the deadlock it needs")
			}
			if err != nil {
				t.Fatalf("the attempt's UPDATE of the key's row: %v", err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the %s of a hold in its key's row must run again after a deadlock: %v", tc.name, err)
			}
		})
	}
}

// awaitLockWait polls INNODB_TRX until a transaction whose statement is
// like query (a LIKE pattern) waits for a row lock, and reports whether
// one did within 10 s; it gives up early when done receives or is closed
// (a receive is put back). InnoDB refreshes what INNODB_TRX shows only
// when nobody has read it for 100 ms: a monitor that polls faster sees its
// first answer for ever. So this one waits 150 ms before each read, the
// first included, which an earlier reader may have made stale.
func awaitLockWait[T any](ctx context.Context, t *testing.T, monitor *sql.DB, query string, done chan T) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case v, ok := <-done:
			if ok {
				done <- v
			}
			return false
		case <-time.After(150 * time.Millisecond):
		}
		var n int
		if err := monitor.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?", query).Scan(&n); err != nil {
			t.Error(err)
			return false
		}
		if n > 0 {
			return true
		}
	}
	logProcesses(ctx, t, monitor)
	return false
}
