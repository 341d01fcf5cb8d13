package mysql

import (
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/golocker/locker"
)

// Guard makes the caller's own GORM transaction conditional on still holding
// lk: inside tx it reads the lock row with SELECT … FOR UPDATE and checks
// that it is RUNNING with lk's owner and version and that its lock_until is
// ahead of the database clock. Call it first in the transaction and return
// its error from the transaction function, so that a stale holder's writes
// roll back instead of landing:
//
//	err := db.Transaction(func(tx *gorm.DB) error {
//		if err := mysql.Guard(tx, lk); err != nil {
//			return err
//		}
//		return tx.Model(&Stock{}).Where("id = ?", id).Update("n", n).Error
//	})
//
// The row lock taken by Guard lasts until tx ends, so no other holder can be
// granted the key before tx committed: its writes are exactly as exclusive
// as the lock. The lock row must live in the database tx writes to, and tx
// must be a transaction (db.Transaction or db.Begin); keep it short, since
// it also holds up the lock's renewal (another holder, if the lock expires
// meanwhile, waits for tx's end before taking it).
//
// Guard returns nil when the lock is held; an error matching
// locker.ErrLost when it was lost (expired, taken by another holder, its row
// deleted); locker.ErrNotHeld when lk was released; locker.ErrInvalidOption
// when tx is not a transaction, lk was not handed out by this package's
// Locker or is a semaphore permit or read-write hold; and the database's
// error otherwise.
func Guard(tx *gorm.DB, lk locker.Lock) error {
	if lk == nil {
		return &locker.Error{Op: "guard", Backend: backend, Err: locker.ErrInvalidOption, Cause: errors.New("nil Lock")}
	}
	fail := func(sentinel, cause error) error {
		return &locker.Error{Op: "guard", Backend: backend, Key: lk.Key(), Err: sentinel, Cause: cause}
	}
	st, _ := locker.DriverState(lk)
	if _, ok := st.(*shareState); ok {
		return fail(locker.ErrInvalidOption, errors.New("Guard takes a plain lock, not a semaphore permit or a read-write hold"))
	}
	s, ok := st.(*lockState)
	if !ok {
		return fail(locker.ErrInvalidOption, errors.New("the Lock was not handed out by a mysql Locker"))
	}
	if tx == nil {
		return fail(locker.ErrInvalidOption, errors.New("nil *gorm.DB"))
	}
	if _, ok := tx.Statement.ConnPool.(gorm.TxCommitter); !ok {
		return fail(locker.ErrInvalidOption, errors.New("Guard must run inside a transaction (db.Transaction or db.Begin)"))
	}
	if err := lk.Err(); err != nil {
		return fail(locker.ErrLost, err)
	}
	rows, err := tx.Session(&gorm.Session{NewDB: true}).Raw(newStatements(s.table).guard, s.key).Rows()
	if err != nil {
		return fail(nil, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fail(nil, err)
		}
		return fail(locker.ErrLost, errors.New("the lock row was deleted"))
	}
	var (
		owner, status []byte
		version       uint64
		alive         bool
	)
	if err := rows.Scan(&owner, &version, &status, &alive); err != nil {
		return fail(nil, fmt.Errorf("scan: %w", err))
	}
	if err := rows.Close(); err != nil {
		return fail(nil, err)
	}
	switch {
	case string(owner) != s.owner || version != s.version:
		return fail(locker.ErrLost, fmt.Errorf("the row was acquired again (version %d, ours %d)", version, s.version))
	case RunState(status) != Running:
		return fail(locker.ErrNotHeld, errors.New("the lock was released"))
	case !alive:
		return fail(locker.ErrLost, errors.New("the lock expired by the database clock"))
	}
	return nil
}
