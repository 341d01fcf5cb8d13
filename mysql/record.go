package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/golocker/locker"
)

// RunState is a lock row's task_status: how the latest run ended, if it did.
type RunState string

const (
	// Running: the row was acquired and not released. The holder still has
	// it only while Run.Held; a RUNNING row that is not held is a run whose
	// holder crashed or lost the lock before releasing.
	Running RunState = "RUNNING"
	// Finished: the last holder released the row.
	Finished RunState = "FINISH"
)

// ErrNoRun is returned by [LastRun] for a key that was never locked (or
// whose row was deleted).
var ErrNoRun = errors.New("mysql: no run recorded")

// Run is the record of the latest run kept in a key's row: its state,
// holder label and times. All times are the database clock's, in UTC.
// locker.Inspect, not Run, tells who holds a key now.
type Run struct {
	// Key is the row's task_name: the Locker's prefix plus the key.
	Key string
	// State is Running or Finished, or, for a key of shared holds,
	// SHARED_ONE (one hold, in this row) or SHARED.
	State RunState
	// Held reports whether the row is RUNNING and its lock_until is still
	// ahead of the database clock.
	Held bool
	// Version is the fencing token of the latest acquisition.
	Version uint64
	// OwnerLabel is the latest holder's label (locker.WithOwnerLabel,
	// host:pid by default).
	OwnerLabel string
	// StartTime is when the latest run acquired the row.
	StartTime time.Time
	// FinishTime is when the latest run released it; zero while it runs,
	// and for a run that never released (crashed, lost).
	FinishTime time.Time
	// UpdateTime is the latest acquisition, renewal or release.
	UpdateTime time.Time
	// LockUntil is when the latest holder's claim ends (or ended) unless
	// renewed.
	LockUntil time.Time
	// Data is the latest holder's data (locker.WithData, locker.SetData);
	// nil when none.
	Data []byte

	live bool   // lock_until is ahead of the database clock
	kind []byte // lock_data of a row held by a shared hold (soleKind)
}

// LastRun reads the record of the latest run of one key, for operators and
// dashboards. It only reads (no row lock) and may run on any handle of the database,
// including a transaction or a read replica. table "" means [DefaultTable];
// key is the row's task_name, that is the Locker's prefix plus the key. It
// returns an error matching [ErrNoRun] when the key has no row.
func LastRun(ctx context.Context, db *gorm.DB, table, key string) (Run, error) {
	if db == nil {
		return Run{}, &locker.Error{Op: "last run", Backend: backend, Key: key, Err: locker.ErrInvalidOption, Cause: errors.New("nil *gorm.DB")}
	}
	if table == "" {
		table = DefaultTable
	}
	if err := validTable(table); err != nil {
		return Run{}, &locker.Error{Op: "last run", Backend: backend, Key: key, Err: locker.ErrInvalidOption, Cause: err}
	}
	rows, err := db.Session(&gorm.Session{NewDB: true}).WithContext(ctx).Raw(newStatements(table).inspect, key).Rows()
	if err != nil {
		return Run{}, &locker.Error{Op: "last run", Backend: backend, Key: key, Cause: err}
	}
	r, err := scanRun(rows, key)
	if err != nil {
		return Run{}, &locker.Error{Op: "last run", Backend: backend, Key: key, Cause: err}
	}
	return r, nil
}

// scanRun reads the latest run of key from the rows of the inspect
// statement, and closes them; ErrNoRun when there is none.
func scanRun(rows *sql.Rows, key string) (Run, error) {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Run{}, err
		}
		return Run{}, ErrNoRun
	}
	return scanRunRow(rows, key)
}

// scanRunRow reads the current row of rows, whose columns are those of the
// inspect statement, after the leading ones given in dest.
func scanRunRow(rows *sql.Rows, key string, dest ...any) (Run, error) {
	var (
		r                            Run
		status, label                []byte
		start, finish, update, until sql.NullInt64
		held                         sql.NullBool
	)
	if err := rows.Scan(append(dest, &status, &r.Version, &label, &start, &finish, &update, &until, &held, &r.Data)...); err != nil {
		return Run{}, fmt.Errorf("scan: %w", err)
	}
	r.Key, r.State, r.OwnerLabel = key, RunState(status), string(label)
	r.StartTime, r.FinishTime, r.UpdateTime, r.LockUntil = utc(start), utc(finish), utc(update), utc(until)
	r.live = held.Valid && held.Bool
	r.Held = r.State == Running && r.live
	if r.State == soleStatus {
		r.kind, r.Data = r.Data, nil
	}
	if len(r.Data) == 0 {
		r.Data = nil
	}
	return r, nil
}

// utc converts microseconds since the epoch to a UTC time; NULL is zero.
func utc(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return time.UnixMicro(us.Int64).UTC()
}
