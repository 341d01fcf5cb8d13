package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

// maxMultiKeys is the most keys TryAcquireMulti takes in one transaction;
// more are taken one by one, so that one transaction never holds many
// rows for long.
const maxMultiKeys = 100

// maxStatementKeys is the most keys TryAcquireMulti takes in one
// statement, which is prepared once per number of keys; more go through
// the transaction.
const maxStatementKeys = 16

// TryAcquireMulti implements driver.MultiAcquirer. One statement takes
// every key when all are free (one round trip). When it refuses, one
// transaction runs each key's acquiring UPDATE, or INSERT IGNORE for a
// missing row, and commits only when every key was taken: it tells a key
// held (by a lock or shared holds) from one that was freed meanwhile. A
// key held or a row another transaction holds rolls it back with
// driver.ErrHeld. A take whose outcome is unknown is undone key by key
// once its fence has passed.
func (d *sqlDriver) TryAcquireMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	gs, err := d.tryAcquireMulti(ctx, reqs)
	if err == nil && d.notify != nil {
		for _, req := range reqs {
			d.notify.acquired(req.Key, req.Owner)
		}
	}
	return gs, classify(err)
}

func (d *sqlDriver) tryAcquireMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	gs, err := d.tryAcquireMultiOnce(ctx, reqs)
	if errors.Is(err, errSettled) {
		// A key left marked by shared holds that all ended is free
		// now: the next attempt may take it.
		gs, err = d.tryAcquireMultiOnce(ctx, reqs)
	}
	return gs, err
}

// errSettled marks the refusal of a multi-key attempt that freed a key left
// marked as held by shared holds that all ended.
var errSettled = errors.New("a key left marked by ended shared holds was freed")

func (d *sqlDriver) tryAcquireMultiOnce(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	if len(reqs) > maxMultiKeys {
		return nil, fmt.Errorf("acquire: %w: %d keys, at most %d in one transaction", driver.ErrNotAtomic, len(reqs), maxMultiKeys)
	}
	ttl := reqs[0].TTL
	for _, req := range reqs {
		if len(req.Owner) > maxOwnerBytes {
			return nil, driver.Permanent(fmt.Errorf("owner token of %d bytes exceeds owner_token's %d", len(req.Owner), maxOwnerBytes))
		}
		ttl = min(ttl, req.TTL)
	}
	label := d.label
	if l := reqs[0].Label; l != "" && l != label {
		label = cleanLabel(l)
	}
	if len(reqs) <= maxStatementKeys {
		gs, err := d.takeAll(ctx, reqs, label, ttl)
		if gs != nil || err != nil {
			return gs, err
		}
	}
	sent := time.Now()
	f := d.clock.Fence(ctx, sent, ttl)
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("acquire: begin: %w", err)
	}
	acquire, insert := tx.StmtContext(ctx, d.acquire), tx.StmtContext(ctx, d.insert)
	grants := make([]driver.Grant, len(reqs))
	for i, req := range reqs {
		ttl := ttlMicros(req.TTL)
		id, err := took(acquire.ExecContext(ctx, req.Owner, label, dataArg(req.Data), ttl, req.Key, f.Store))
		if err == nil && id == 0 {
			id, err = took(insert.ExecContext(ctx, req.Key, req.Owner, label, dataArg(req.Data), ttl, f.Store))
		}
		if err == nil && id == 0 {
			err = driver.Held(0)
		}
		if err != nil {
			// Nothing is committed: the rollback, or the server when
			// the connection is gone, undoes the statements so far.
			_ = tx.Rollback()
			if contended(err) {
				return nil, driver.Held(0)
			}
			if errors.Is(err, driver.ErrHeld) {
				return nil, d.heldMulti(ctx, req.Key, err)
			}
			return nil, fmt.Errorf("acquire %q: %w", req.Key, err)
		}
		grants[i] = driver.Grant{
			Token:    uint64(id),
			Validity: req.TTL,
			Since:    sent,
			State:    &lockState{table: d.cfg.Table, key: req.Key, owner: req.Owner, version: uint64(id)},
		}
	}
	if err := tx.Commit(); err != nil {
		err = fmt.Errorf("acquire: commit: %w", err)
		if definite(err) {
			return nil, err
		}
		return nil, d.undoMulti(ctx, reqs, f, err)
	}
	return grants, nil
}

// takeAll takes every key of reqs in one statement (multiSQL), each for
// ttl. It returns no grants and no error when the statement took nothing
// without saying why: a key not free, or a passed fence.
func (d *sqlDriver) takeAll(ctx context.Context, reqs []driver.Request, label string, ttl time.Duration) ([]driver.Grant, error) {
	stmt, err := d.stmt(ctx, d.multi, len(reqs), d.sql.multiSQL)
	if err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	args := make([]any, 0, 3+2*len(reqs))
	args = append(args, label, ttlMicros(ttl))
	for _, req := range reqs {
		args = append(args, req.Key, req.Owner)
	}
	sent := time.Now()
	f := d.clock.Fence(ctx, sent, ttl)
	res, err := stmt.ExecContext(ctx, append(args, f.Store)...)
	var me *gomysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == errRefused:
		return nil, nil // rolled back: a key is not free
	case contended(err):
		return nil, driver.Held(0)
	case err != nil:
		err = fmt.Errorf("acquire: %w", err)
		if definite(err) {
			return nil, err
		}
		return nil, d.undoMulti(ctx, reqs, f, err)
	}
	// Each row counts 1 when inserted and 2 when updated.
	n, err := res.RowsAffected()
	if err == nil && n == 0 {
		return nil, nil // the fence passed
	}
	id, ierr := res.LastInsertId()
	if err != nil || ierr != nil || n < int64(len(reqs)) || n > 2*int64(len(reqs)) || id <= 0 {
		err = fmt.Errorf("acquire: %d keys, %d rows affected, version %d: %w", len(reqs), n, id, errors.Join(err, ierr, errors.New("unexpected outcome")))
		return nil, d.undoMulti(ctx, reqs, f, err)
	}
	grants := make([]driver.Grant, len(reqs))
	for i, req := range reqs {
		grants[i] = driver.Grant{
			Token:    uint64(id),
			Validity: ttl,
			Since:    sent,
			State:    &lockState{table: d.cfg.Table, key: req.Key, owner: req.Owner, version: uint64(id)},
		}
	}
	return grants, nil
}

// heldMulti is the refusal of a transaction that could not take key,
// held is its error: a key marked as held by shared holds is refused with
// their conflict while one of them is live, and settled otherwise, so
// that the next attempt can take it (the error then matches errSettled
// too).
func (d *sqlDriver) heldMulti(ctx context.Context, key string, held error) error {
	var rem sql.NullInt64
	var now int64
	var shared sql.NullBool
	if err := d.remaining.QueryRowContext(ctx, key).Scan(&rem, &now, &shared); err != nil || !shared.Valid || !shared.Bool {
		return held
	}
	free, err := d.settleShared(ctx, key, 1)
	switch {
	case err != nil:
		return held
	case free:
		return fmt.Errorf("%w (%w)", held, errSettled)
	}
	return fmt.Errorf("acquire %q: %w", key, errSharedKey)
}

// took returns the version an acquiring statement set (its fencing token),
// or 0 when it took no row.
func took(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, err
	}
	id, err := res.LastInsertId()
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("no version returned (LAST_INSERT_ID %d): %v", id, err)
	}
	return id, nil
}

// undoMulti gives up every row reqs may hold after a commit whose outcome
// is unknown, once the fence f has passed, and returns cause; wrapped in a
// driver.Residue that tries again when the database could not be reached.
func (d *sqlDriver) undoMulti(ctx context.Context, reqs []driver.Request, f driver.Fence, cause error) error {
	out := func(ctx context.Context) error {
		var errs []error
		for _, req := range reqs {
			if err := d.undoAcquire(ctx, req.Key, req.Owner, f); err != nil && !errors.Is(err, driver.ErrNotHeld) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(reqs[0].TTL, 5*time.Second))
	defer cancel()
	if err := out(cctx); err != nil {
		return &driver.Residue{Err: cause, Cleanup: out}
	}
	return cause
}
