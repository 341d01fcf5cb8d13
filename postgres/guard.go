package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/golocker/locker"
)

// Guard makes the caller's own pgx transaction conditional on still
// holding lk: inside tx it reads the lock row with SELECT … FOR UPDATE and
// checks that it is RUNNING with lk's owner and version and that its
// lock_until is ahead of the database clock. Call it first in the
// transaction and roll back on its error, so that a stale holder's writes
// never land:
//
//	tx, err := pool.Begin(ctx)
//	…
//	defer tx.Rollback(ctx)
//	if err := postgres.Guard(ctx, tx, lk); err != nil {
//		return err
//	}
//	// writes
//	return tx.Commit(ctx)
//
// The row lock lasts until tx ends, so no other holder is granted the key
// before tx committed. The lock table must live in the database tx writes
// to. Keep tx short: it also holds up the lock's renewal.
//
// Guard returns nil when the lock is held; an error matching
// locker.ErrLost when it was lost (expired, taken by another holder, its
// row deleted); locker.ErrNotHeld when lk was released;
// locker.ErrInvalidOption for a nil tx, a shared hold, or a lk not handed out by this
// package's Locker; and the database's error otherwise.
func Guard(ctx context.Context, tx pgx.Tx, lk locker.Lock) error {
	if tx == nil {
		return guard(ctx, nil, lk)
	}
	return guard(ctx, func(ctx context.Context, q, key string, dest ...any) error {
		return tx.QueryRow(ctx, q, key).Scan(dest...)
	}, lk)
}

// GuardSQL is [Guard] for a database/sql transaction on pgx/stdlib (for
// GORM, the *sql.Tx under a transaction).
func GuardSQL(ctx context.Context, tx *sql.Tx, lk locker.Lock) error {
	if tx == nil {
		return guard(ctx, nil, lk)
	}
	return guard(ctx, func(ctx context.Context, q, key string, dest ...any) error {
		err := tx.QueryRowContext(ctx, q, key).Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			return pgx.ErrNoRows
		}
		return err
	}, lk)
}

// guard checks lk's row, read and locked by row (nil: there is no
// transaction).
func guard(ctx context.Context, row func(ctx context.Context, q, key string, dest ...any) error, lk locker.Lock) error {
	if lk == nil {
		return &locker.Error{Op: "guard", Backend: backend, Err: locker.ErrInvalidOption, Cause: errors.New("nil Lock")}
	}
	fail := func(sentinel, cause error) error {
		return &locker.Error{Op: "guard", Backend: backend, Key: lk.Key(), Err: sentinel, Cause: cause}
	}
	st, _ := locker.DriverState(lk)
	if _, ok := st.(*shareState); ok {
		return fail(locker.ErrInvalidOption, errors.New("the Lock is a shared hold (a semaphore permit or a read or write hold), which Guard cannot check; guard with a plain lock"))
	}
	s, ok := st.(*lockState)
	if !ok {
		return fail(locker.ErrInvalidOption, errors.New("the Lock was not handed out by a postgres Locker"))
	}
	if row == nil {
		return fail(locker.ErrInvalidOption, errors.New("nil transaction"))
	}
	if err := lk.Err(); err != nil {
		return fail(locker.ErrLost, err)
	}
	var (
		owner, status string
		version       int64
		alive         bool
	)
	err := row(ctx, newStatements(s.table).guard, s.key, &owner, &version, &status, &alive)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fail(locker.ErrLost, errors.New("the lock row was deleted"))
	case err != nil:
		return fail(nil, err)
	case owner != s.owner || version != s.version:
		return fail(locker.ErrLost, fmt.Errorf("the row was acquired again (version %d, ours %d)", version, s.version))
	case status != "RUNNING":
		return fail(locker.ErrNotHeld, errors.New("the lock was released"))
	case !alive:
		return fail(locker.ErrLost, errors.New("the lock expired by the database clock"))
	}
	return nil
}
