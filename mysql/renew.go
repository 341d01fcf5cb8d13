package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// RenewBatch implements driver.BatchRenewer: one UPDATE per chunk of up to
// 512 leases (two for 1,000 held locks), plus one SELECT for a chunk in which
// some lease did not match, to tell which. Shared holds have an UPDATE of
// their own; those in their keys' rows then renew with the plain locks.
func (d *sqlDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	validity := make([]time.Duration, len(ls))
	errs := make([]error, len(ls))
	// Leases of one Locker share its TTL; group anyway.
	byTTL := map[time.Duration][]int{}
	var ttls []time.Duration
	for i, l := range ls {
		if _, ok := byTTL[l.TTL]; !ok {
			ttls = append(ttls, l.TTL)
		}
		byTTL[l.TTL] = append(byTTL[l.TTL], i)
	}
	for _, ttl := range ttls {
		// Shared holds (their State tells them apart) live in a table of
		// their own. A hold taken in its key's row looks there first: it
		// may have been moved, and the key's row then may be locked by an
		// attempt cut off from its client, which the renewal must not
		// wait for. Holds found in neither place renew with the plain
		// locks, in their keys' rows; one that was moved meanwhile is
		// looked for once more.
		var plain, shared []int
		for _, i := range byTTL[ttl] {
			if _, ok := ls[i].State.(*shareState); ok {
				shared = append(shared, i)
			} else {
				plain = append(plain, i)
			}
		}
		d.renewSharedChunks(ctx, ls, shared, ttl, validity, errs)
		var inRow []int
		for _, i := range shared {
			if s := ls[i].State.(*shareState); s.rowHeld() {
				if errs[i] == nil {
					s.moved.Store(true)
				} else if errs[i] == driver.ErrNotHeld {
					errs[i] = nil
					plain = append(plain, i)
					inRow = append(inRow, i)
				}
			}
		}
		for idx := plain; len(idx) > 0; {
			n := min(len(idx), renewChunk)
			d.renewChunk(ctx, ls, idx[:n], ttl, validity, errs)
			idx = idx[n:]
		}
		var moved []int
		for _, i := range inRow {
			if errs[i] == driver.ErrNotHeld {
				ls[i].State.(*shareState).moved.Store(true)
				errs[i] = nil
				moved = append(moved, i)
			}
		}
		d.renewSharedChunks(ctx, ls, moved, ttl, validity, errs)
	}
	return validity, errs, nil
}

// renewSharedChunks renews the shared leases ls[idx...] in the table of
// shared holds, renewChunk at a time.
func (d *sqlDriver) renewSharedChunks(ctx context.Context, ls []driver.Lease, idx []int, ttl time.Duration, validity []time.Duration, errs []error) {
	for len(idx) > 0 {
		n := min(len(idx), renewChunk)
		d.renewShared(ctx, ls, idx[:n], ttl, validity, errs)
		idx = idx[n:]
	}
}

// renewChunk renews the leases ls[idx...] (at most renewChunk) with one
// UPDATE, padded to a power of two with repeats of the last lease so that a
// few prepared statements serve every batch size.
func (d *sqlDriver) renewChunk(ctx context.Context, ls []driver.Lease, idx []int, ttl time.Duration, validity []time.Duration, errs []error) {
	fail := func(err error) {
		for _, i := range idx {
			errs[i] = err
		}
	}
	states, distinct := paddedRows(ls, idx)
	size := len(states)
	args := make([]any, 0, 1+4*size)
	args = append(args, ttlMicros(ttl))
	for _, s := range states {
		args = append(args, s.key)
	}
	for _, s := range states {
		args = append(args, s.key, s.owner, s.version)
	}
	var n int64
	err := d.renewer.run(ctx, func(_ sqlTarget, prepare prepareFunc) error {
		stmt, err := prepare("renew", size, d.sql.renewSQL)
		if err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		res, err := stmt.ExecContext(ctx, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		fail(fmt.Errorf("renew: %w", err))
		return
	}
	renewed := distinct
	if int(n) != len(distinct) {
		// Some lease did not match (or, without CLIENT_FOUND_ROWS, a row
		// was already at the same lock_until): ask which rows are held
		// by whom. A row this owner still holds now was renewed above.
		if renewed, err = d.liveRows(ctx, states); err != nil {
			fail(fmt.Errorf("renew: %w", err))
			return
		}
	}
	for _, i := range idx {
		s := leaseRow(ls[i])
		_, share := ls[i].State.(*shareState)
		switch {
		case renewed[s]:
			validity[i] = ttl
			if d.notify != nil {
				d.notify.renewed(s.key, s.owner)
			}
		case share:
			errs[i] = driver.ErrNotHeld
		default:
			errs[i] = driver.ErrNotHeld
			d.forgetLater(leaseState(ls[i]))
		}
	}
}

// paddedRows returns the rows of the leases ls[idx...], padded to a power
// of two with repeats of the last one, so that a few prepared statements
// serve every size, and the set of distinct rows.
func paddedRows(ls []driver.Lease, idx []int) ([]rowKey, map[rowKey]bool) {
	states := make([]rowKey, padded(len(idx)))
	distinct := map[rowKey]bool{}
	for j := range states {
		states[j] = leaseRow(ls[idx[min(j, len(idx)-1)]])
		distinct[states[j]] = true
	}
	return states, distinct
}

// forgetLater is forget off the caller's goroutine (a renewal must not
// wait for a named-lock statement).
func (d *sqlDriver) forgetLater(s lockState) {
	if s.name == nil {
		d.forget(s)
		return
	}
	d.notify.wg.Add(1)
	go func() {
		defer d.notify.wg.Done()
		d.forget(s)
	}()
}

// liveRows returns which of the rows are held by their owner and version,
// on the renewal connection.
func (d *sqlDriver) liveRows(ctx context.Context, states []rowKey) (found map[rowKey]bool, err error) {
	err = d.renewer.run(ctx, func(_ sqlTarget, prepare prepareFunc) error {
		stmt, err := prepare("live", len(states), d.sql.liveSQL)
		if err != nil {
			return err
		}
		found, err = queryRows(ctx, stmt, states)
		return err
	})
	return found, err
}

// rowsWhere returns the rows (key, owner, version) that the query of
// len(states) keys, prepared from text into cache, lists.
func (d *sqlDriver) rowsWhere(ctx context.Context, cache map[int]*sql.Stmt, text func(int) string, states []rowKey) (map[rowKey]bool, error) {
	stmt, err := d.stmt(ctx, cache, len(states), text)
	if err != nil {
		return nil, err
	}
	return queryRows(ctx, stmt, states)
}

// queryRows runs stmt, a query of len(states) keys, and returns the rows
// (key, owner, version) it lists.
func queryRows(ctx context.Context, stmt *sql.Stmt, states []rowKey) (map[rowKey]bool, error) {
	args := make([]any, len(states))
	for i, s := range states {
		args[i] = s.key
	}
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := map[rowKey]bool{}
	for rows.Next() {
		var key, owner []byte
		var version uint64
		if err := rows.Scan(&key, &owner, &version); err != nil {
			return nil, err
		}
		found[rowKey{key: string(key), owner: string(owner), version: version}] = true
	}
	return found, rows.Err()
}

// padded rounds n up to a power of two.
func padded(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// stmt returns the prepared statement of size n from cache, preparing it on
// first use.
func (d *sqlDriver) stmt(ctx context.Context, cache map[int]*sql.Stmt, n int, text func(int) string) (*sql.Stmt, error) {
	d.mu.Lock()
	s := cache[n]
	closed := d.closed
	d.mu.Unlock()
	if s != nil {
		return s, nil
	}
	if closed {
		return nil, errors.New("driver closed")
	}
	s, err := d.db.PrepareContext(ctx, text(n))
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		_ = s.Close()
		return nil, errors.New("driver closed")
	}
	if old := cache[n]; old != nil {
		_ = s.Close()
		return old, nil
	}
	cache[n] = s
	return s, nil
}
