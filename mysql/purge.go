package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/golocker/locker"
)

const (
	// MinPurgeIdle is the shortest idle time [Purge] accepts: the margin
	// by which the database clock may step back without a recreated row
	// handing out a token lower than its deleted predecessor's.
	MinPurgeIdle = time.Second

	// purgeBatch is the most rows one DELETE removes, so that a purge of a
	// large table never holds many row locks at once.
	purgeBatch = 1000
)

// Purge deletes the rows of lock table table (DefaultTable when "") that
// no Locker acquired, renewed or released for at least idle, and that are
// not held (kept rows, locker.MinHold, count as held until their end); it
// returns how many it deleted. The table keeps one row per key ever locked:
// run Purge from time to time (a cron job) when keys come and go.
// Purge also deletes the rows of the table of shared holds whose hold or
// place in line ended at least idle ago; they are not counted. It frees
// the row of a key marked as held by shared holds when no hold or place in
// line of the key is left, whatever its times; a later purge deletes it.
//
// Fencing tokens stay strictly increasing across a purge: a row's version
// grows by one per acquisition from the database clock in microseconds at
// its creation, so it never exceeds the clock at its last use, and a row
// created again later starts at the clock, above it. This holds as long as
// the database clock never steps back by more than idle (at least
// [MinPurgeIdle]; an hour or more is a good idle in practice).
//
// Purge runs on db's pool in batches of 1000 rows, each a DELETE in
// primary key order; a Locker taking a row while it is being purged either
// keeps it (the row was used, so it is no longer idle) or creates it again. The account needs DELETE on the
// table. It returns an error matching locker.ErrInvalidOption for a bad db,
// table or idle.
func Purge(ctx context.Context, db *gorm.DB, table string, idle time.Duration) (int64, error) {
	if ctx == nil {
		return 0, &locker.Error{Op: "purge", Backend: backend, Err: locker.ErrInvalidOption, Cause: errors.New("nil context")}
	}
	sqlDB, err := sqlHandle(db)
	if err != nil {
		return 0, &locker.Error{Op: "purge", Backend: backend, Err: locker.ErrInvalidOption, Cause: err}
	}
	if table == "" {
		table = DefaultTable
	}
	if err := validTable(table); err != nil {
		return 0, &locker.Error{Op: "purge", Backend: backend, Err: locker.ErrInvalidOption, Cause: err}
	}
	if idle < MinPurgeIdle {
		return 0, &locker.Error{Op: "purge", Backend: backend, Err: locker.ErrInvalidOption,
			Cause: fmt.Errorf("idle %v is shorter than MinPurgeIdle (%v)", idle, MinPurgeIdle)}
	}
	stmt := purgeSQL(table)
	var total int64
	for {
		res, err := sqlDB.ExecContext(ctx, stmt, idle.Microseconds(), purgeBatch)
		if err != nil {
			return total, &locker.Error{Op: "purge", Backend: backend, Cause: fmt.Errorf("delete idle rows of %s: %w", table, err)}
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, &locker.Error{Op: "purge", Backend: backend, Cause: fmt.Errorf("delete idle rows of %s: %w", table, err)}
		}
		total += n
		if n < purgeBatch {
			break
		}
	}
	if len(table)+len(sharedSuffix) > maxTableName {
		return total, nil
	}
	// The table of shared holds: rows of holders and waiters that ended
	// idle ago. Only the lock table's rows count in the total.
	for {
		res, err := sqlDB.ExecContext(ctx, purgeSharedSQL(table), idle.Microseconds(), purgeBatch)
		var me *gomysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 {
			return total, nil // no table of shared holds (Config.SkipMigration)
		}
		if err != nil {
			return total, &locker.Error{Op: "purge", Backend: backend, Cause: fmt.Errorf("delete ended rows of %s%s: %w", table, sharedSuffix, err)}
		}
		if n, err := res.RowsAffected(); err != nil || n < purgeBatch {
			break
		}
	}
	if err := settleMarked(ctx, sqlDB, table); err != nil {
		return total, &locker.Error{Op: "purge", Backend: backend, Cause: fmt.Errorf("free keys of %s whose shared holds ended: %w", table, err)}
	}
	return total, nil
}

// settleMarked frees the rows of table's keys marked as held by shared
// holds none of which is left (see settle), in batches, each key in a
// transaction of its own. A later purge deletes them once idle.
func settleMarked(ctx context.Context, db *sql.DB, table string) error {
	srv, err := serverInfo(ctx, db)
	if err != nil {
		return err
	}
	d := newDriver(db, Config{Table: table}, 0)
	defer func() { _ = d.Close() }() // waits for its transactions' session restores
	d.setServer(srv)
	d.ttl = locker.DefaultTTL
	q := "SELECT task_name FROM `" + table + "` AS k WHERE task_status = '" + sharedStatus + "' AND task_name > ?" +
		" AND NOT EXISTS (SELECT 1 FROM `" + table + sharedSuffix + "` AS h WHERE h.task_name = k.task_name AND h.owner_token <> '')" +
		" ORDER BY task_name LIMIT ?"
	after := []byte{}
	for {
		keys, err := markedKeys(ctx, db, q, after)
		if err != nil {
			return err
		}
		for _, key := range keys {
			if _, err := d.settleShared(ctx, key, maxAttempts); err != nil {
				return err
			}
		}
		if len(keys) < purgeBatch {
			return nil
		}
		after = []byte(keys[len(keys)-1])
	}
}

// markedKeys runs q, the query of settleMarked, after a key.
func markedKeys(ctx context.Context, db *sql.DB, q string, after []byte) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, after, purgeBatch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, string(k))
	}
	return keys, rows.Err()
}

// purgeSharedSQL deletes up to a batch of rows of the table of shared holds
// whose hold or place in line ended at least an idle time ago. Args: idle
// µs, batch size.
func purgeSharedSQL(table string) string {
	return "DELETE FROM `" + table + sharedSuffix + "` WHERE lock_until < TIMESTAMPADD(MICROSECOND, -?, " + dbNow + ")" +
		" AND owner_token <> '' ORDER BY task_name, owner_token LIMIT ?"
}

// purgeSQL deletes up to a batch of rows idle for a time. A row is idle when
// its update_time (every acquisition, renewal, release and keep sets it) is
// older than the idle time and its claim (lock_until) has ended. A row
// marked as held by shared holds is not, whatever its times (their
// renewals change only their own rows): it is purged once settled. InnoDB
// checks the condition again on the latest version of each row it locks, so
// a row acquired meanwhile is left alone. Args: idle µs, batch size.
func purgeSQL(table string) string {
	return "DELETE FROM `" + table + "` WHERE update_time < TIMESTAMPADD(MICROSECOND, -?, " + dbNow + ")" +
		" AND lock_until <= " + dbNow + " AND task_status <> '" + sharedStatus + "' ORDER BY task_name LIMIT ?"
}
