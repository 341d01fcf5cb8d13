package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// A key's first shared hold lives in the key's own row, as a plain lock
// does (takeRow on a free row, the transaction on a row marked SHARED): the row is SHARED_ONE, owner_token and version are the hold's,
// lock_until is its end, lock_data holds its kind (see soleKind), and
// finish_time is set once it was given up with a MinHold left. Taking and
// releasing it are one single-row statement each, the lock's. Any other
// hold of the key lives in the table of shared holds: a shared
// transaction never locks a row held this way (lockKey); it moves the hold
// into the table of shared holds first, in autocommit statements
// (moveSole), and the key's row becomes SHARED, which attempts lock. So a
// hold taken in the row renews in the table of shared holds first, and in
// the row only when not found there (RenewBatch): no renewal waits for an
// attempt cut off from its client. A hold found moved remembers it.

// soleStatus is the task_status of a key held by one shared hold that
// lives in the key's row.
const soleStatus = "SHARED_ONE"

// seqUntil is the lock_until of a row made ready for a move in the table
// of shared holds: long past, so that no reader of live holds counts it.
const seqUntil = "'1970-01-01 00:00:01'"

// errFastOut is the cause of a one-statement take that took nothing: the
// transaction decides.
var errFastOut = errors.New("not a first holder of a free key")

// errSole is the refusal of a shared transaction to lock a key's row that
// holds a live shared hold of its own: move it first.
var errSole = errors.New("a shared hold lives in the key's row")

// soleKind is the lock_data of a row held by a shared hold: its mode,
// weight and limit.
func soleKind(s driver.Share) []byte {
	return fmt.Appendf(nil, "%d %d %d", int(s.Mode), s.Weight, s.Limit)
}

// parseKind reads soleKind's encoding.
func parseKind(b []byte) (driver.Share, error) {
	var s driver.Share
	var mode int
	if _, err := fmt.Sscanf(string(b), "%d %d %d", &mode, &s.Weight, &s.Limit); err != nil {
		return driver.Share{}, fmt.Errorf("the kind %q of a shared hold in its key's row: %w", b, err)
	}
	s.Mode = driver.Mode(mode)
	return s, nil
}

// takeRow is the one-statement take of a key's first shared hold, in the
// key's row: a row that is free or expired. A row marked SHARED is left to
// the transaction, which puts a first holder in the row too (see
// shareAttempt). It returns errFastOut when it took nothing; any other
// error with the outcome unknown is a driver.Residue.
func (d *sqlDriver) takeRow(ctx context.Context, st string, req driver.Request, s driver.Share, label string) (driver.Grant, error) {
	if s.Mode == driver.Permits && s.Weight > s.Limit {
		return driver.Grant{}, errFastOut
	}
	take, err := d.sharedStmt(ctx, takeRowSQL(d.sql.table))
	if err != nil {
		return driver.Grant{}, errFastOut
	}
	sent := time.Now()
	f := d.clock.Fence(ctx, sent, req.TTL)
	res, err := take.ExecContext(ctx, req.Owner, label, soleKind(s), ttlMicros(req.TTL), req.Key, f.Store)
	if err != nil {
		if definite(err) {
			return driver.Grant{}, errFastOut // rolled back: the transaction tells why
		}
		return driver.Grant{}, d.undoTake(req, f, st, fmt.Errorf("shared hold: %w", classify(err)))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err != nil {
			return driver.Grant{}, d.undoTake(req, f, st, fmt.Errorf("shared hold: %w", err))
		}
		return driver.Grant{}, errFastOut
	}
	id, err := res.LastInsertId()
	if err != nil || id <= 0 {
		return driver.Grant{}, d.undoTake(req, f, st, fmt.Errorf("shared hold: no token returned (LAST_INSERT_ID %d): %v", id, err))
	}
	token := uint64(id)
	return driver.Grant{Token: token, Validity: req.TTL, Since: sent,
		State: &shareState{key: req.Key, owner: req.Owner, token: token, inRow: true}}, nil
}

// takeRowSQL is the statement of takeRow on lock table t (quoted): a
// plain lock's acquire, but for the status and the kind in lock_data.
// Args: owner, label, kind (soleKind), ttl µs, key, fence µs.
func takeRowSQL(t string) string {
	return "UPDATE " + t + " SET version = LAST_INSERT_ID(version + 1), task_status = '" + soleStatus + "'," +
		" owner_token = ?, owner_label = ?, lock_data = ?, start_time = " + dbNow + ", finish_time = NULL," +
		" lock_until = " + untilExpr + ", update_time = " + dbNow +
		" WHERE task_name = ? AND " + acquireFree + " AND " + beforeFence
}

// soleGrantSQL puts a key's first shared hold in the key's row, in a
// transaction that holds the row. Args: token, owner, label, kind, ttl µs,
// key, fence µs.
func soleGrantSQL(t string) string {
	return "UPDATE " + t + " SET version = ?, task_status = '" + soleStatus + "'," +
		" owner_token = ?, owner_label = ?, lock_data = ?, start_time = " + dbNow + ", finish_time = NULL," +
		" lock_until = " + untilExpr + ", update_time = " + dbNow +
		" WHERE task_name = ? AND " + beforeFence
}

// soleReleaseSQL gives up a shared hold in its key's row, which frees the
// key. Args: key, owner, token.
func soleReleaseSQL(t string) string {
	return "UPDATE " + t + " SET lock_data = NULL, task_status = 'FINISH', finish_time = " + dbNow + ", lock_until = " + dbNow +
		", update_time = " + dbNow + " WHERE task_name = ? AND owner_token = ? AND version = ? AND task_status = '" + soleStatus + "'"
}

// undoTake is err as a driver.Residue that gives up the hold a
// one-statement take may have left, in the key's row or moved, once its
// fence f has passed.
func (d *sqlDriver) undoTake(req driver.Request, f driver.Fence, st string, err error) error {
	key, owner := req.Key, req.Owner
	return &driver.Residue{Err: err, Cleanup: func(ctx context.Context) error {
		if err := d.clock.AwaitFence(ctx, f, d.queryNow); err != nil {
			return fmt.Errorf("undo: %w", classify(err))
		}
		undo, err := d.sharedStmt(ctx, "UPDATE "+d.sql.table+" SET lock_data = NULL, task_status = 'FINISH', finish_time = "+dbNow+
			", lock_until = "+dbNow+", update_time = "+dbNow+" WHERE task_name = ? AND owner_token = ? AND task_status = '"+soleStatus+"'")
		if err == nil {
			_, err = undo.ExecContext(ctx, key, owner)
		}
		if err != nil {
			return classify(err)
		}
		return d.dropRow(ctx, st, key, owner)
	}}
}

// dropRow deletes owner's row of key, whatever it is, by primary key.
func (d *sqlDriver) dropRow(ctx context.Context, st, key, owner string) error {
	del, err := d.sharedStmt(ctx, "DELETE FROM "+st+" WHERE task_name = ? AND owner_token = ?")
	if err == nil {
		_, err = del.ExecContext(ctx, key, owner)
	}
	return classify(err)
}

// moveSole moves the live shared hold in key's row, if any, into the
// table of shared holds st, and marks the row SHARED; the hold keeps its
// token, end and label. Each statement commits on its own: a row made
// ready in st, dead until the move, then one statement that moves the
// hold if it is still in the row, unchanged but for its end (renewals),
// and still live. A caller runs its transaction again afterwards,
// whatever came of it.
func (d *sqlDriver) moveSole(ctx context.Context, st, key string) error {
	t := d.sql.table
	read, err := d.sharedStmt(ctx, "SELECT owner_token, version, lock_data FROM "+t+
		" WHERE task_name = ? AND task_status = '"+soleStatus+"' AND lock_until > "+dbNow)
	if err != nil {
		return err
	}
	var (
		owner, kind []byte
		version     uint64
	)
	switch err := read.QueryRowContext(ctx, key).Scan(&owner, &version, &kind); {
	case errors.Is(err, sql.ErrNoRows):
		return nil // gone or moved meanwhile
	case err != nil:
		return err
	}
	s, err := parseKind(kind)
	if err != nil {
		return driver.Permanent(err)
	}
	ready, err := d.sharedStmt(ctx, "INSERT IGNORE INTO "+st+
		" (task_name, owner_token, mode, weight, share_limit, token, queued, kept, owner_label, lock_until, start_time)"+
		" VALUES (?, ?, 0, 0, 0, 0, 0, 0, '', "+seqUntil+", "+dbNow+")")
	if err != nil {
		return err
	}
	if _, err := ready.ExecContext(ctx, key, owner); err != nil {
		return err
	}
	move, err := d.sharedStmt(ctx, "UPDATE "+t+" AS k JOIN "+st+" AS h ON h.task_name = k.task_name AND h.owner_token = k.owner_token"+
		" SET h.mode = ?, h.weight = ?, h.share_limit = ?, h.token = k.version, h.queued = 0, h.kept = k.finish_time IS NOT NULL,"+
		" h.owner_label = k.owner_label, h.lock_until = k.lock_until, h.start_time = k.start_time,"+
		" k.task_status = '"+sharedStatus+"', k.lock_data = NULL"+
		" WHERE k.task_name = ? AND k.owner_token = ? AND k.version = ? AND k.task_status = '"+soleStatus+"' AND k.lock_until > "+dbNow)
	if err != nil {
		return err
	}
	_, err = move.ExecContext(ctx, int(s.Mode), s.Weight, s.Limit, key, owner, version)
	return err
}

// soleHold is the driver.Status of a key held by a shared hold in its row.
func (r Run) soleHold() driver.Status {
	if !r.live {
		return driver.Status{}
	}
	s, _ := parseKind(r.kind) // a kind unknown shows as mode 0
	h := driver.Holder{Mode: s.Mode, Weight: s.Weight, Label: r.OwnerLabel, Token: r.Version, Acquired: r.StartTime, Expires: r.LockUntil}
	st := driver.Status{Held: true, Label: h.Label, Token: h.Token, Acquired: h.Acquired, Expires: h.Expires, Holders: []driver.Holder{h}}
	if s.Mode == driver.Permits {
		st.Limit = s.Limit
	}
	return st
}
