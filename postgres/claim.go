package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golocker/locker/driver"
)

// A shared attempt on a key that is not free (a waiter's claim, a second
// permit) is one batch of statements sent at once (querier.batch), one
// transaction at READ COMMITTED: insert the key's row unless it exists,
// lock it, move a first holder out of it (see first.go), then claim. The
// claim decides in SQL what admit did in Go, on a snapshot taken after the
// lock, so it sees every grant and place in line committed before: each of
// those locks the key's row.

// claimSQL is the statement that decides a shared attempt on the key's
// holders and waiters (table st) once the key's row (table t) is locked:
// as etcd's and ZooKeeper's queues decide, a writer must be first, a
// reader needs no writer ahead, permits need the weights ahead and their
// own within the limit, where ahead are every holder and the waiters
// before the request in line (all of them when it is not in line). A
// request that fits is granted, one that does not and queues takes a
// place in line, one already in line renews its place; the grant and the
// new place advance the key's version, unless the fence passed, and
// delete the expired rows the statement saw. When one of those was
// renewed meanwhile (its renewal was on the way when the statement read
// it), the statement fails with division_by_zero (SQLSTATE 22012), which
// rolls the attempt back. Rows of a key not held by shared holds are of an
// earlier use, all ended: they count for nothing.
//
// It returns one row: whether a plain lock holds the key, the mode and
// limit of a live row of another kind or limit (NULL when none), whether
// the request fits, whether it was in line, the version it took (NULL
// when none), and the µs until the first holder's claim ends (NULL when
// no holder). Args: key, owner, label, ttl µs, fence µs, mode, weight,
// limit, queue.
func claimSQL(t, st string) string {
	permits, write := fmt.Sprint(int(driver.Permits)), fmt.Sprint(int(driver.Write))
	return "WITH kr AS MATERIALIZED (SELECT task_status = 'RUNNING' AND owner_token = " + sharedOwnerSQL + " AS shared," +
		" task_status = 'RUNNING' AND lock_until > " + dbNow + " AND owner_token <> " + sharedOwnerSQL + " AS plain" +
		" FROM " + t + " WHERE task_name = $1::text)," +
		" a AS MATERIALIZED (SELECT owner_token, mode, weight, share_limit, queued, lock_until > " + dbNow + " AS live," +
		" " + micros("lock_until") + " - " + micros(dbNow) + " AS rem" +
		" FROM " + st + " WHERE task_name = $1::text AND EXISTS (SELECT 1 FROM kr WHERE shared))," +
		" lv AS (SELECT * FROM a WHERE live)," +
		" bad AS (SELECT mode, share_limit FROM lv WHERE (mode = " + permits + ") <> ($6::smallint = " + permits + ") OR share_limit <> $8::int LIMIT 1)," +
		" me AS (SELECT queued FROM lv WHERE owner_token = $2::text AND queued > 0)," +
		" ah AS (SELECT mode, weight FROM lv WHERE owner_token <> $2::text" +
		" AND (queued = 0 OR queued < COALESCE((SELECT queued FROM me), 9223372036854775807)))," +
		" d AS MATERIALIZED (SELECT NOT EXISTS (SELECT 1 FROM kr WHERE plain) AND NOT EXISTS (SELECT 1 FROM bad) AS ok," +
		" NOT EXISTS (SELECT 1 FROM ah WHERE mode = " + write + " OR $6::smallint = " + write + ")" +
		" AND ($6::smallint <> " + permits + " OR COALESCE((SELECT sum(weight) FROM ah), 0) + $7::int <= $8::int) AS fits," +
		" EXISTS (SELECT 1 FROM me) AS lined)," +
		" w AS MATERIALIZED (SELECT ok AND (fits OR $9::bool AND NOT lined) AS take, ok AND NOT fits AND lined AS stay FROM d)," +
		" e AS (SELECT owner_token FROM a WHERE NOT live AND owner_token <> $2::text AND (SELECT take FROM w))," +
		" x AS (DELETE FROM " + st + " WHERE task_name = $1::text AND owner_token IN (SELECT owner_token FROM e)" +
		" AND lock_until <= " + dbNow + " RETURNING 1)," +
		" k AS (UPDATE " + t + " SET version = version + 1," +
		" start_time = CASE WHEN owner_token = " + sharedOwnerSQL + " AND task_status = 'RUNNING' THEN start_time ELSE " + dbNow + " END," +
		" task_status = 'RUNNING', owner_token = " + sharedOwnerSQL + ", owner_label = '" + sharedLabel + "'," +
		" lock_until = GREATEST(lock_until, " + untilAt("$4") + "), finish_time = NULL, update_time = " + dbNow +
		" WHERE task_name = $1::text AND (SELECT take FROM w) AND " + fenceAt("$5") + " RETURNING version)," +
		" h AS (" + holderInsert(st, "CASE WHEN (SELECT fits FROM d) THEN k.version ELSE 0 END",
		"CASE WHEN (SELECT fits FROM d) THEN 0 ELSE k.version END") + ")," +
		" s AS (UPDATE " + st + " SET lock_until = " + untilAt("$4") +
		" WHERE task_name = $1::text AND owner_token = $2::text AND queued > 0 AND (SELECT stay FROM w) AND " + fenceAt("$5") + ")," +
		" n AS (SELECT (SELECT count(*) FROM x) AS gone, (SELECT count(*) FROM e) AS seen)" +
		" SELECT EXISTS (SELECT 1 FROM kr WHERE plain), (SELECT mode FROM bad), (SELECT share_limit FROM bad), d.fits, d.lined," +
		" (SELECT version FROM k) + CASE WHEN n.gone = n.seen THEN 0 ELSE 1 / (n.gone - n.gone) END," +
		" (SELECT min(rem) FROM lv WHERE queued = 0)" +
		" FROM d, n"
}

// shareAttempt is one attempt of TryAcquireShared on a key that was not
// free, in one round trip (see claimSQL). Its statement that grants or
// records the request carries a fence, which it sets f to just before it
// sends it.
func (d *pgDriver) shareAttempt(ctx context.Context, req driver.Request, s driver.Share, label string, f *driver.Fence) (driver.Grant, error) {
	*f = d.clock.Fence(ctx, time.Now(), req.TTL)
	var (
		plain, fits, lined bool
		badMode            sql.NullInt16
		badLimit           sql.NullInt32
		version, next      sql.NullInt64
		found              bool
	)
	err := d.q.batch(ctx, []stmt{
		{d.shared.insertKey, []any{req.Key}},
		{d.shared.lockKey, []any{req.Key}},
		{d.first.move, []any{req.Key}},
		{d.shared.claim, []any{req.Key, req.Owner, label, ttlMicros(req.TTL), f.Store, int16(s.Mode), s.Weight, s.Limit, s.Queue}},
	}, func(scan func(...any) error) error {
		found = true
		return scan(&plain, &badMode, &badLimit, &fits, &lined, &version, &next)
	})
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "22012":
		// A hold counted as expired was renewed meanwhile: the decision
		// did not stand, and the attempt rolled back.
		return driver.Grant{}, errRenewed
	case err != nil:
		return driver.Grant{}, err
	case !found:
		return driver.Grant{}, errors.New("the claim returned no row")
	case plain:
		return driver.Grant{}, fmt.Errorf("%w: the key is a plain lock, not %s", driver.ErrConflict, shareKindOf(s.Mode, s.Limit))
	case badMode.Valid:
		return driver.Grant{}, fmt.Errorf("%w: the key is %s, not %s", driver.ErrConflict,
			shareKindOf(driver.Mode(badMode.Int16), int(badLimit.Int32)), shareKindOf(s.Mode, s.Limit))
	}
	rem := time.Duration(next.Int64) * time.Microsecond
	switch {
	case !fits && lined:
		// Still in line: the place lasts another TTL, or has ended.
		return driver.Grant{}, d.queued(req, rem)
	case !fits && !s.Queue:
		return driver.Grant{}, driver.Held(rem)
	case !version.Valid:
		return driver.Grant{}, errFenced
	case !fits:
		return driver.Grant{}, d.queued(req, rem)
	}
	return driver.Grant{Token: uint64(version.Int64), Validity: req.TTL,
		State: &shareState{key: req.Key, owner: req.Owner, token: version.Int64}}, nil
}
