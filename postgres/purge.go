package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
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
// returns how many it deleted. It leaves the rows of keys that shared
// holds hold, or held and left marked (see the package doc): the key's
// next acquisition frees such a row. The table keeps one row per key ever locked:
// run Purge from time to time (a cron job) when keys come and go.
//
// Fencing tokens stay strictly increasing across a purge: a row's version
// grows by one per acquisition from the database clock in microseconds at
// its creation, so it never exceeds the clock at its last use, and a row
// created again later starts at the clock, above it. This holds as long as
// the database clock never steps back by more than idle (at least
// [MinPurgeIdle]; an hour or more is a good idle in practice).
//
// Purge runs on pool in batches of 1000 rows, each one DELETE that skips
// rows another session has locked. A Locker taking a row while it is being
// purged either keeps it (the row was used, so it is no longer idle) or
// creates it again. A batch rolled back by a serialization failure runs
// again. The account needs DELETE on the table. Purge returns an error
// matching locker.ErrInvalidOption for a nil pool, a bad table or idle.
func Purge(ctx context.Context, pool *pgxpool.Pool, table string, idle time.Duration) (int64, error) {
	if pool == nil {
		return 0, purgeInvalid(errors.New("nil *pgxpool.Pool"))
	}
	return purge(ctx, newPoolQuerier(pool), table, idle)
}

// PurgeDB is [Purge] on a *sql.DB opened with pgx's database/sql driver
// (github.com/jackc/pgx/v5/stdlib). It returns an error matching
// locker.ErrInvalidOption for a db on another driver.
func PurgeDB(ctx context.Context, db *sql.DB, table string, idle time.Duration) (int64, error) {
	if err := checkStdlib(db); err != nil {
		return 0, purgeInvalid(err)
	}
	return purge(ctx, newDBQuerier(db), table, idle)
}

func purgeInvalid(cause error) error {
	return &locker.Error{Op: "purge", Backend: backend, Err: locker.ErrInvalidOption, Cause: cause}
}

func purge(ctx context.Context, q querier, table string, idle time.Duration) (int64, error) {
	if ctx == nil {
		return 0, purgeInvalid(errors.New("nil context"))
	}
	if table == "" {
		table = DefaultTable
	}
	if err := validTable(table); err != nil {
		return 0, purgeInvalid(err)
	}
	if idle < MinPurgeIdle {
		return 0, purgeInvalid(fmt.Errorf("idle %v is shorter than MinPurgeIdle (%v)", idle, MinPurgeIdle))
	}
	stmt := purgeSQL(table)
	var total int64
	for try := 0; ; {
		n, err := q.exec(ctx, stmt, idle.Microseconds(), purgeBatch)
		if retryable(err) && try < serializationRetries {
			try++
			if !driver.Sleep(ctx, driver.Jitter(time.Duration(try)*time.Millisecond)) {
				return total, &locker.Error{Op: "purge", Backend: backend, Cause: ctx.Err()}
			}
			continue
		}
		if err != nil {
			return total, &locker.Error{Op: "purge", Backend: backend, Cause: classify(fmt.Errorf("delete idle rows of %s: %w", table, err))}
		}
		try = 0
		total += n
		if n < purgeBatch {
			return total, nil
		}
	}
}

// purgeSQL deletes up to a batch of rows idle for a time. A row is idle when
// its update_time (every acquisition, renewal, release and keep sets it) is
// older than the idle time, its claim (lock_until) has ended, and shared
// holds do not hold it (their renewals leave it alone). The
// subquery locks the batch, skipping rows an acquisition has locked; at
// READ COMMITTED both it and the DELETE check the condition again on a row
// changed since the statement began, so a row acquired meanwhile stays.
// Args: idle µs, batch size.
func purgeSQL(table string) string {
	t := quoteIdent(table)
	idle := "update_time < " + dbNow + " - $1::float8 * interval '1 microsecond' AND lock_until <= " + dbNow +
		" AND owner_token <> " + sharedOwnerSQL
	return "DELETE FROM " + t + " WHERE task_name IN (SELECT task_name FROM " + t + " WHERE " + idle +
		" ORDER BY task_name LIMIT $2 FOR UPDATE SKIP LOCKED) AND " + idle
}
