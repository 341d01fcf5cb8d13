package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golocker/locker/driver"
)

// The first shared hold of a free key takes the key's row itself, as a
// plain lock does: one row written each way, where a hold in the table of
// shared holds writes the key's row and its own. Its owner_token is
// firstPrefix and the hold's owner token, its version the hold's token,
// its lock_until the hold's expiry, and lock_data the hold's mode, weight
// and limit as text ("mode weight limit"). It is released, kept and
// renewed as a plain lock is, under that owner_token.
//
// A shared attempt that finds a live first holder (a second permit, a
// reader beside a reader, a request that queues) moves it into the table
// of shared holds, in the same batch and under the same row lock, before
// it decides: the key's row is then marked sharedOwner as before, and the
// hold is an ordinary row of the table of shared holds with its token,
// expiry, label and start. The holder learns of the move at its next
// renewal, release or keep, which tries the key's row first and the table
// of shared holds when the row is no longer its own.
//
// No transaction that waits for its client locks a row held this way
// (lockTx skips it): the hold's renewal writes the row, and would wait
// for such a transaction cut off from its client.

const (
	// firstPrefix begins the owner_token of a key's row that its first
	// shared hold holds; no owner token of a plain lock has this form.
	firstPrefix = "(first) "
	// firstPrefixSQL is firstPrefix as an SQL literal.
	firstPrefixSQL = "'" + firstPrefix + "'"
)

// firstLive is the SQL condition that the lock table's row, whose columns
// are prefixed with p ("" or "l."), holds a live first holder.
func firstLive(p string) string {
	return p + "task_status = 'RUNNING' AND starts_with(" + p + "owner_token, " + firstPrefixSQL + ") AND " + p + "lock_until > " + dbNow
}

// firstField is the SQL of field i (1 mode, 2 weight, 3 limit) of a first
// holder's lock_data, as an integer.
func firstField(i int) string {
	return "split_part(convert_from(lock_data, 'UTF8'), ' ', " + strconv.Itoa(i) + ")::int"
}

// firstData is the SQL of a first holder's lock_data from parameters
// mode, weight and limit.
func firstData(mode, weight, limit string) string {
	return "convert_to(" + mode + "::text || ' ' || " + weight + "::text || ' ' || " + limit + "::text, 'UTF8')"
}

// firstStatements holds the SQL texts of first holders for one table.
type firstStatements struct {
	// take grants a hold on a key no lock or shared hold holds, in one
	// statement: it takes the key's row for the hold as the plain acquire
	// does. It returns the version, or no row when the key was not free
	// or the fence passed. Args: key, owner, label, ttl µs, fence µs,
	// mode, weight, limit.
	take string
	// release frees the key's row when the hold still holds it, and
	// notifies the key's waiters, returning one row when it did. Args:
	// key, owner, channel, token.
	release string
	// move moves a live first holder of the key into the table of
	// shared holds and marks the key's row as held by shared holds; it
	// runs after the row is locked. Args: key.
	move string
	// setLimit sets a first holder's limit when it is a permit. It
	// returns one row when a first holder holds the key: its mode, and
	// whether the limit was set. Args: key, limit.
	setLimit string
}

func newFirstStatements(table string) firstStatements {
	t, st := quoteIdent(table), quoteIdent(table+sharedSuffix)
	free := "task_status = 'FINISH', finish_time = " + dbNow + ", lock_until = " + dbNow + ", update_time = " + dbNow
	return firstStatements{
		take: "INSERT INTO " + t + " AS l" +
			" (task_name, task_status, version, owner_token, owner_label, lock_until, start_time, update_time, lock_data)" +
			" SELECT $1::text, 'RUNNING', " + micros(dbNow) + ", " + firstPrefixSQL + " || $2::text, $3::text, " + untilAt("$4") + ", " + dbNow + ", " + dbNow +
			", " + firstData("$6::smallint", "$7::int", "$8::int") +
			" WHERE " + fenceAt("$5") +
			" ON CONFLICT (task_name) DO UPDATE SET task_status = 'RUNNING', version = l.version + 1," +
			" owner_token = EXCLUDED.owner_token, owner_label = EXCLUDED.owner_label, lock_until = EXCLUDED.lock_until," +
			" start_time = EXCLUDED.start_time, finish_time = NULL, update_time = EXCLUDED.update_time, lock_data = EXCLUDED.lock_data" +
			" WHERE (l.task_status <> 'RUNNING' OR l.lock_until <= " + dbNow + " AND l.owner_token <> " + sharedOwnerSQL + ")" +
			" AND " + fenceAt("$5") + " RETURNING l.version",
		release: "WITH r AS (UPDATE " + t + " SET " + free +
			" WHERE task_name = $1 AND owner_token = " + firstPrefixSQL + " || $2::text AND version = $4 AND task_status = 'RUNNING' RETURNING task_name)" +
			" SELECT pg_notify($3, task_name)::text FROM r",
		move: "WITH o AS (SELECT version, substr(owner_token, " + strconv.Itoa(len(firstPrefix)+1) + ") AS owner, owner_label, lock_until, start_time," +
			" finish_time IS NOT NULL AS kept, " + firstField(1) + " AS mode, " + firstField(2) + " AS weight, " + firstField(3) + " AS lim" +
			" FROM " + t + " WHERE task_name = $1::text AND " + firstLive("") + ")," +
			" i AS (INSERT INTO " + st +
			" (task_name, owner_token, mode, weight, share_limit, token, queued, kept, owner_label, lock_until, start_time)" +
			" SELECT $1::text, owner, mode, weight, lim, version, 0, kept, owner_label, lock_until, COALESCE(start_time, " + dbNow + ") FROM o" +
			" ON CONFLICT (task_name, owner_token) DO UPDATE SET mode = EXCLUDED.mode, weight = EXCLUDED.weight," +
			" share_limit = EXCLUDED.share_limit, token = EXCLUDED.token, queued = 0, kept = EXCLUDED.kept," +
			" owner_label = EXCLUDED.owner_label, lock_until = EXCLUDED.lock_until, start_time = EXCLUDED.start_time)" +
			" UPDATE " + t + " SET owner_token = " + sharedOwnerSQL + ", owner_label = '" + sharedLabel + "', lock_data = NULL," +
			" finish_time = NULL, update_time = " + dbNow + " WHERE task_name = $1::text AND EXISTS (SELECT 1 FROM o)",
		setLimit: "WITH o AS (SELECT " + firstField(1) + " AS mode FROM " + t + " WHERE task_name = $1::text AND " + firstLive("") + ")," +
			" u AS (UPDATE " + t + " SET lock_data = " + firstData(firstField(1), firstField(2), "$2::int") +
			" WHERE task_name = $1::text AND " + firstLive("") + " AND " + firstField(1) + " = " + strconv.Itoa(int(driver.Permits)) + " RETURNING 1)" +
			" SELECT mode, EXISTS (SELECT 1 FROM u) FROM o",
	}
}

// firstOwner is the owner_token of the key's row that the first holder
// with owner token owner holds.
func firstOwner(owner string) string { return firstPrefix + owner }

// inRow reports whether the hold may still be its key's first holder:
// taken in the key's row, and not yet found moved.
func (s *shareState) inRow() bool { return s.first && !s.moved.Load() }

// firstStatus is the status of a key whose row a live first holder
// holds, from the row's label, version, start, expiry and lock_data.
func firstStatus(label string, version int64, start, until sql.NullInt64, data []byte) (driver.Status, error) {
	var mode, weight, limit int
	if _, err := fmt.Sscan(strings.TrimSpace(string(data)), &mode, &weight, &limit); err != nil {
		return driver.Status{}, fmt.Errorf("the first holder's lock_data %q is not \"mode weight limit\": %w", data, err)
	}
	h := driver.Holder{Mode: driver.Mode(mode), Weight: weight, Label: label, Token: uint64(version), Acquired: utc(start), Expires: utc(until)}
	s := driver.Status{Held: true, Label: label, Token: h.Token, Acquired: h.Acquired, Expires: h.Expires, Holders: []driver.Holder{h}}
	if h.Mode == driver.Permits {
		s.Limit = limit
	}
	return s, nil
}

// releaseFirst releases a hold taken in its key's row: in the row, or,
// when it moved, in the table of shared holds.
func (d *pgDriver) releaseFirst(ctx context.Context, s *shareState) error {
	n, err := d.freeing(ctx, d.first.release, s.key, s.owner, d.cfg.Table, s.token)
	if err != nil {
		return classify(fmt.Errorf("release: %w", err))
	}
	if n > 0 {
		return nil
	}
	s.moved.Store(true)
	return d.releaseShared(ctx, s)
}

// keepFirst is keepShared for a hold taken in its key's row.
func (d *pgDriver) keepFirst(ctx context.Context, s *shareState, remaining time.Duration) error {
	n, err := d.q.exec(ctx, d.sql.keep, ttlMicros(remaining), s.key, firstOwner(s.owner), s.token)
	if err != nil {
		return classify(fmt.Errorf("keep: %w", err))
	}
	if n > 0 {
		return nil
	}
	s.moved.Store(true)
	return d.keepShared(ctx, s, remaining)
}

// setFirstLimit sets the limit of a first holder of key. It reports
// whether a first holder held the key.
func (d *pgDriver) setFirstLimit(ctx context.Context, key string, limit int) (bool, error) {
	var (
		found, set bool
		mode       int
	)
	err := d.q.query(ctx, d.first.setLimit, []any{key, limit}, func(scan func(...any) error) error {
		found = true
		return scan(&mode, &set)
	})
	switch {
	case err != nil:
		return false, err
	case found && driver.Mode(mode) != driver.Permits:
		return true, fmt.Errorf("%w: the key is a read-write lock, not a semaphore", driver.ErrConflict)
	}
	// A first holder moved meanwhile is not set: the transaction sets it.
	return found && set, nil
}
