package mysql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// rowKey identifies one acquisition's row: key, owner and version.
type rowKey struct {
	key, owner string
	version    uint64
}

func leaseRow(l driver.Lease) rowKey {
	if s, ok := l.State.(*shareState); ok {
		return rowKey{key: s.key, owner: s.owner, version: s.token}
	}
	s := leaseState(l)
	return rowKey{key: s.key, owner: s.owner, version: s.version}
}

// leaseState returns the lock state of a lease.
func leaseState(l driver.Lease) lockState {
	if s, ok := l.State.(*lockState); ok {
		return *s
	}
	return lockState{key: l.Key, owner: l.Owner, version: l.Token}
}

// Release implements driver.Driver: FINISH and finish_time, only where owner
// and version still match and the row is RUNNING.
func (d *sqlDriver) Release(ctx context.Context, l driver.Lease) error {
	if s, ok := l.State.(*shareState); ok {
		return d.releaseShared(ctx, s)
	}
	s := leaseState(l)
	// A lock from the line gives its named lock up in the release
	// statement itself, on its session.
	res, done, err := s.name.releaseRow(ctx, s)
	if !done {
		res, err = d.release.ExecContext(ctx, s.key, s.owner, s.version)
		// Whatever the outcome, this owner is done with the key (the
		// engine stops renewing it). The waiters are woken after the
		// statement returned, so after the row was freed.
		d.forget(s)
	}
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// forget gives up the key's named lock of a lock this driver is done
// with: its own session's, or the holder goroutine's.
func (d *sqlDriver) forget(s lockState) {
	switch {
	case s.name != nil:
		s.name.end()
	case d.notify != nil:
		d.notify.released(s.key, s.owner)
	}
}

// Break implements driver.Breaker (locker.ForceUnlock): FINISH and
// finish_time whoever holds the row. Waiters poll, or wake when their
// GET_LOCK times out (the holder keeps its named lock until it learns of
// the loss).
func (d *sqlDriver) Break(ctx context.Context, key string) error {
	res, err := d.db.ExecContext(ctx, d.sql.force, key)
	if err != nil {
		return fmt.Errorf("break: %w", classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("break: %w", err)
	}
	if n == 0 {
		// Not a plain lock: the key's shared holds, if any.
		if err := d.breakShared(ctx, key); err != nil {
			return fmt.Errorf("break: %w", err)
		}
	}
	return nil
}

// Inspect implements driver.Inspector from the key's latest run (see
// [LastRun]); Waiters is 0: the line of waiters is the server's queue of
// GET_LOCK calls, which it does not count.
func (d *sqlDriver) Inspect(ctx context.Context, key string) (driver.Status, error) {
	rows, err := d.db.QueryContext(ctx, d.sql.inspect, key)
	if err != nil {
		return driver.Status{}, fmt.Errorf("inspect: %w", err)
	}
	r, err := scanRun(rows, key)
	switch {
	case errors.Is(err, ErrNoRun):
		return driver.Status{}, nil
	case err != nil:
		return driver.Status{}, fmt.Errorf("inspect: %w", err)
	case r.State == sharedStatus:
		st, err := d.inspectShared(ctx, key)
		if err != nil {
			return driver.Status{}, fmt.Errorf("inspect: %w", err)
		}
		return st, nil
	case r.State == soleStatus:
		return r.soleHold(), nil
	case !r.Held:
		return driver.Status{}, nil
	}
	return r.status(), nil
}

// status is the driver.Status of a held run.
func (r Run) status() driver.Status {
	return driver.Status{Held: true, Label: r.OwnerLabel, Token: r.Version, Acquired: r.StartTime, Expires: r.LockUntil, Data: r.Data}
}

// Keep implements driver.Keeper (locker.MinHold): the run is over
// (finish_time set) but the row stays RUNNING until remaining from now on
// the database's clock, renewed by nobody; waiters poll until then.
func (d *sqlDriver) Keep(ctx context.Context, l driver.Lease, remaining time.Duration) error {
	if s, ok := l.State.(*shareState); ok {
		defer d.forget(lockState{key: s.key, owner: s.owner})
		return d.keepShared(ctx, s, remaining)
	}
	s := leaseState(l)
	// Nobody runs the key any more: the waiters may line up for its
	// lock_until (they find the row held and poll until then).
	defer d.forget(s)
	res, err := d.keep.ExecContext(ctx, max(remaining.Microseconds(), 1), s.key, s.owner, s.version)
	if err != nil {
		return fmt.Errorf("keep: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("keep: %w", err)
	}
	if n == 0 {
		// Not ours any more, or a retry of a Keep that took effect (same
		// values: MySQL counts the row as not changed).
		return driver.ErrNotHeld
	}
	return nil
}
