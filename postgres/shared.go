package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/golocker/locker/driver"
)

// Shared holds (semaphore permits, read and write holds) live in a second
// table, the lock table's name plus sharedSuffix, one row per holder or
// waiter. The key's row in the lock table stays the key's mutex and token
// sequence: every attempt is one transaction that locks it first, so that
// attempts on one key run one at a time, and every grant advances its
// version, so that tokens increase across plain locks and shared holds.
// While a key has shared holders or waiters its row is RUNNING with the
// owner sharedOwner, which a plain acquisition never takes. The last hold
// to leave frees it; when the holders crashed, the next plain acquisition
// does.

const (
	// sharedSuffix names the table of shared holds after the lock table's.
	sharedSuffix = "_shared"
	// sharedOwner is the owner_token of a key's row while shared holds
	// hold it; no owner token of a lock has this form.
	sharedOwner = "(shared)"
	// sharedOwnerSQL is sharedOwner as an SQL literal.
	sharedOwnerSQL = "'" + sharedOwner + "'"
	// sharedLabel is the owner_label of such a row.
	sharedLabel = "(shared holds)"
	// shareAttempts is how many times a transaction on shared holds runs
	// before a deadlock or serialization failure is reported.
	shareAttempts = 5
)

// SharedTableSQL returns the DDL of the table of shared holds of lock table
// table, which New creates unless Config.SkipMigration is set.
func SharedTableSQL(table string) string { return sharedTableSQL(table) }

func sharedTableSQL(table string) string {
	return "CREATE TABLE IF NOT EXISTS " + quoteIdent(table+sharedSuffix) + " (\n" +
		"  task_name   text        NOT NULL,\n" +
		"  owner_token text        NOT NULL,\n" +
		"  mode        smallint    NOT NULL,\n" +
		"  weight      integer     NOT NULL,\n" +
		"  share_limit integer     NOT NULL,\n" +
		"  token       bigint      NOT NULL,\n" +
		"  queued      bigint      NOT NULL,\n" +
		"  kept        boolean     NOT NULL,\n" +
		"  owner_label text        NOT NULL,\n" +
		"  lock_until  timestamptz NOT NULL,\n" +
		"  start_time  timestamptz NOT NULL,\n" +
		"  PRIMARY KEY (task_name, owner_token)\n" +
		")"
}

// migrateShared creates the table of shared holds unless it exists; a lock
// table whose name leaves no room for the suffix has none.
func migrateShared(ctx context.Context, q querier, table string) error {
	if len(table)+len(sharedSuffix) > maxTableName {
		return nil
	}
	return migrate(ctx, q, table+sharedSuffix, sharedTableSQL(table))
}

// untilAt is the database clock plus the µs in parameter p.
func untilAt(p string) string { return dbNow + " + " + p + "::float8 * interval '1 microsecond'" }

// fenceAt is true while the database clock is before the fence in
// parameter p (see beforeFence).
func fenceAt(p string) string {
	return dbNow + " < timestamptz 'epoch' + " + p + "::float8 * interval '1 microsecond'"
}

// sharedStatements holds the SQL texts of shared holds for one table.
type sharedStatements struct {
	table string // the quoted table of shared holds
	// lockKey reads and row-locks the key's row. Args: key.
	lockKey string
	// lockTx is lockKey for a transaction that waits for its client: it
	// skips a row that a live first holder holds, whose renewal would
	// wait for the lock. Args: key.
	lockTx string
	// isFirst reads whether a live first holder holds the key's row.
	// Args: key.
	isFirst string
	// insertKey inserts the key's row free unless it exists, waiting for
	// an uncommitted insert of it. Args: key.
	insertKey string
	// rows reads the key's holders and waiters, expired ones included:
	// holders first, then waiters in line order. Args: key.
	rows string
	// claim is a shared attempt after the key's row is locked, in one
	// statement (see claimSQL). Args: key, owner, label, ttl µs, fence µs,
	// mode, weight, limit, whether the request queues.
	claim string
	// drop deletes live rows of the key matching a condition appended to
	// it, from $2 on, and returns how many. Args: key, ….
	drop string
	// settle deletes the key's expired holds and waiters, frees the key's
	// row when it deleted every row the statement saw, and notifies the
	// key's waiters. A renewal on the way saves its row from the delete,
	// and then the key's row stays taken: a snapshot read of the rows
	// would miss the renewal. Args: key, channel.
	settle string
	// settleTake is settle for a plain acquisition, in one statement: it
	// takes the key's row for the caller, as the plain acquire does,
	// where settle would free it. A hold or waiter added since the
	// statement's snapshot advanced the row's version, which the take
	// checks on the row's newest version. It returns one row: the
	// version taken or NULL, whether the row was marked as held by
	// shared holds, and the database clock (µs since the epoch). Args:
	// key, owner, label, ttl µs, fence µs, data.
	settleTake string
	// release deletes a hold, frees the key's row when it was the last,
	// and notifies the key's waiters, returning one row when it deleted
	// the hold (see leaving). Args: key, owner, channel, token.
	release string
	// withdraw is release for a place in line. Args: key, owner, channel.
	withdraw string
	// keep ends a hold but leaves it in place (MinHold). Args: key, owner,
	// token, remaining µs.
	keep string
	// renew renews plain leases ($1-$4, as statements.renew) and shared
	// ones ($5-$8: keys, owners, tokens, ttls µs) in one statement and
	// returns the renewed ones: shared, key, owner, version or token.
	renew string
	// inspect reads the key's live holders and waiters. Args: key.
	inspect string
	// setLimit sets the limit of the key's holders and waiters and
	// notifies its waiters. Args: key, limit, channel.
	setLimit string
}

func newSharedStatements(table string, plain statements) sharedStatements {
	t, st := quoteIdent(table), quoteIdent(table+sharedSuffix)
	return sharedStatements{
		table:   st,
		lockKey: "SELECT task_status, version, owner_token, lock_until > " + dbNow + " FROM " + t + " WHERE task_name = $1 FOR UPDATE",
		lockTx: "SELECT task_status, version, owner_token, lock_until > " + dbNow + " FROM " + t +
			" WHERE task_name = $1 AND NOT (" + firstLive("") + ") FOR UPDATE",
		isFirst: "SELECT " + firstLive("") + " FROM " + t + " WHERE task_name = $1",
		insertKey: "INSERT INTO " + t + " (task_name, task_status, version, owner_token, owner_label, lock_until, update_time)" +
			" VALUES ($1, 'FINISH', " + micros(dbNow) + ", '', '', " + dbNow + ", " + dbNow + ") ON CONFLICT (task_name) DO NOTHING",
		rows: "SELECT owner_token, mode, weight, share_limit, queued, " + micros("lock_until") + " - " + micros(dbNow) +
			" FROM " + st + " WHERE task_name = $1 ORDER BY queued, token",
		claim: claimSQL(t, st),
		drop:  "DELETE FROM " + st + " WHERE task_name = $1 AND lock_until > " + dbNow,
		settle: "WITH o AS (SELECT 1 FROM " + st + " WHERE task_name = $1)," +
			" x AS (DELETE FROM " + st + " WHERE task_name = $1 AND lock_until <= " + dbNow + " RETURNING 1)," +
			" f AS (UPDATE " + t + " SET task_status = 'FINISH', owner_token = '', finish_time = " + dbNow + ", lock_until = " + dbNow +
			", update_time = " + dbNow + " WHERE task_name = $1 AND owner_token = " + sharedOwnerSQL +
			" AND (SELECT count(*) FROM x) = (SELECT count(*) FROM o))" +
			" SELECT pg_notify($2, $1)::text",
		settleTake: "WITH " + settling(t, st, "= $1::text") + "," +
			" a AS (UPDATE " + t + " AS l SET task_status = 'RUNNING', version = l.version + 1, owner_token = $2::text, owner_label = $3::text," +
			" lock_until = " + untilAt("$4") + ", start_time = " + dbNow + ", finish_time = NULL, update_time = " + dbNow + ", lock_data = $6::bytea" +
			" WHERE task_name = $1::text AND " + settled("l") + " AND " + fenceAt("$5") + " RETURNING l.version)" +
			" SELECT (SELECT version FROM a), EXISTS (SELECT 1 FROM v), " + micros(dbNow),
		release:  leaving(t, st, "token = $4 AND queued = 0"),
		withdraw: leaving(t, st, "queued > 0"),
		keep: "UPDATE " + st + " SET kept = true, lock_until = " + untilAt("$4") +
			" WHERE task_name = $1 AND owner_token = $2 AND token = $3 AND queued = 0 AND lock_until > " + dbNow,
		renew: "WITH p AS (" + plain.renew + ")," +
			" s AS (UPDATE " + st + " AS s SET lock_until = " + dbNow + " + r.ttl::float8 * interval '1 microsecond'" +
			" FROM unnest($5::text[], $6::text[], $7::bigint[], $8::bigint[]) AS r(task_name, owner_token, token, ttl)" +
			" WHERE s.task_name = r.task_name AND s.owner_token = r.owner_token AND s.token = r.token" +
			" AND s.queued = 0 AND NOT s.kept AND s.lock_until > " + dbNow +
			" RETURNING s.task_name, s.owner_token, s.token)" +
			" SELECT false, task_name, owner_token, version FROM p UNION ALL SELECT true, task_name, owner_token, token FROM s",
		inspect: "SELECT mode, weight, share_limit, token, queued, owner_label, " + micros("start_time") + ", " + micros("lock_until") +
			" FROM " + st + " WHERE task_name = $1 AND lock_until > " + dbNow + " ORDER BY queued, token",
		setLimit: setLimitSQL(st),
	}
}

// settling is the SQL of the CTEs with which a plain acquisition frees
// the rows of the keys whose task_name matches keys (an SQL comparison)
// that are marked as held by shared holds: v, each marked row's version in
// the statement's snapshot, read once; o, the key's holds and waiters the
// snapshot sees, and whether each is live; x, the delete of the expired
// ones. A renewal on the way saves its row from the delete.
func settling(t, st, keys string) string {
	return "v AS MATERIALIZED (SELECT task_name, version FROM " + t + " WHERE task_name " + keys + " AND owner_token = " + sharedOwnerSQL + ")," +
		" o AS (SELECT task_name, lock_until > " + dbNow + " AS live FROM " + st + " WHERE task_name " + keys + ")," +
		" x AS (DELETE FROM " + st + " WHERE task_name " + keys + " AND lock_until <= " + dbNow + " RETURNING task_name)"
}

// settled is the SQL condition, over the CTEs of settling, under which a
// plain acquisition takes row l of the lock table that is marked as held
// by shared holds: x deleted every hold and waiter of the key that o saw,
// and the row's version is v's. Any hold or waiter added after the
// snapshot advanced the version, which the condition reads on the row's
// newest version when it waited for the row.
func settled(l string) string {
	return l + ".owner_token = " + sharedOwnerSQL +
		" AND " + l + ".version = (SELECT version FROM v WHERE v.task_name = " + l + ".task_name)" +
		" AND (SELECT count(*) FROM x WHERE x.task_name = " + l + ".task_name)" +
		" = (SELECT count(*) FROM o WHERE o.task_name = " + l + ".task_name)"
}

// holderInsert is the SQL that records the holder or waiter of a request
// in the table of shared holds st, with the token and the place in line
// given as SQL over k, the key's updated row. Args: key, owner, label, ttl
// µs, mode, weight, limit ($1-$4, $6-$8).
func holderInsert(st, token, queued string) string {
	return "INSERT INTO " + st +
		" (task_name, owner_token, mode, weight, share_limit, token, queued, kept, owner_label, lock_until, start_time)" +
		" SELECT $1, $2, $6, $7, $8, " + token + ", " + queued + ", false, $3, " + untilAt("$4") + ", " + dbNow + " FROM k" +
		" ON CONFLICT (task_name, owner_token) DO UPDATE SET mode = EXCLUDED.mode, weight = EXCLUDED.weight," +
		" share_limit = EXCLUDED.share_limit, token = EXCLUDED.token, queued = EXCLUDED.queued, kept = false," +
		" owner_label = EXCLUDED.owner_label, lock_until = EXCLUDED.lock_until, start_time = EXCLUDED.start_time"
}

// txIdle is how long a transaction on shared holds of a lock with this
// TTL may wait for its client before the server ends it: a third of the
// TTL, within 1 s and 10 s. A client cut off in the middle of one holds
// up the key's other attempts that long, not for as long as the cut.
func txIdle(ttl time.Duration) time.Duration { return min(max(ttl/3, time.Second), 10*time.Second) }

// txTries bounds the transactions inTx runs for one call: a first one,
// and one more when the first one's connection closed before its commit.
const txTries = 2

// inTx runs fn in a transaction on shared holds (querier.txOnce) that the
// server ends after txIdle of the Locker's TTL without the client. A
// transaction whose connection closed before its commit was sent (a
// session that idle_in_transaction_session_timeout ended, on a loaded
// machine) was rolled back: inTx runs fn once more, on another
// connection, unless ctx ended. Its error then wraps errRolledBack, and so
// is definite. A connection that closed during the commit leaves the
// outcome unknown: inTx returns that error as it is, and does not run fn
// again. fn must set what it reports to its caller only on its way to
// returning nil.
func (d *pgDriver) inTx(ctx context.Context, fn func(runner) error) (err error) {
	if stall := d.txStall; stall != nil {
		inner := fn
		fn = func(tx runner) error {
			if err := stall(tx); err != nil {
				return err
			}
			return inner(tx)
		}
	}
	for range txTries {
		err = d.q.txOnce(ctx, txIdle(d.ttl), fn)
		if !errors.Is(err, errRolledBack) || ctx.Err() != nil {
			break
		}
	}
	return err
}

// leaving is the SQL of a holder or waiter of the table of shared holds st
// that leaves, chosen by cond, in one statement. It deletes its row and
// the expired rows of the key, and frees the key's row in lock table t
// when no other row is left: when every other row it saw was expired and
// deleted by it, and the key's row is unchanged since, for every new
// holder or waiter advances its version. A renewal on the way saves its
// row from the delete, and then the key's row stays taken. It skips the
// key's row when an attempt holds it locked: that attempt either adds a
// row or leaves the key to the next. It returns one row when it deleted
// its own, and notifies the key's waiters then.
func leaving(t, st, cond string) string {
	return "WITH r AS (DELETE FROM " + st + " WHERE task_name = $1 AND owner_token = $2 AND " + cond +
		" AND lock_until > " + dbNow + " RETURNING task_name)," +
		" o AS (SELECT 1 FROM " + st + " WHERE task_name = $1 AND owner_token <> $2)," +
		" x AS (DELETE FROM " + st + " WHERE task_name = $1 AND owner_token <> $2 AND lock_until <= " + dbNow + " RETURNING 1)," +
		" k AS (SELECT task_name FROM " + t + " WHERE task_name = $1 AND task_status = 'RUNNING' AND owner_token = " + sharedOwnerSQL +
		" AND version = (SELECT version FROM " + t + " WHERE task_name = $1) AND EXISTS (SELECT 1 FROM r)" +
		" AND (SELECT count(*) FROM x) = (SELECT count(*) FROM o) FOR UPDATE SKIP LOCKED)," +
		" f AS (UPDATE " + t + " SET task_status = 'FINISH', owner_token = '', finish_time = " + dbNow + ", lock_until = " + dbNow +
		", update_time = " + dbNow + " WHERE task_name IN (SELECT task_name FROM k))" +
		" SELECT pg_notify($3, task_name)::text FROM r"
}

// shareState is the driver's state of a shared hold.
type shareState struct {
	key, owner string
	token      int64
	// first is true for a hold taken in its key's row (see first.go),
	// moved once it was found in the table of shared holds.
	first bool
	moved atomic.Bool
}

// shareKey names a shared hold in the table of shared holds.
type shareKey struct {
	key, owner string
	token      int64
}

// checkShared returns an error when the lock table's name leaves no room
// for the table of shared holds.
func (d *pgDriver) checkShared() error {
	if len(d.cfg.Table)+len(sharedSuffix) > maxTableName {
		return driver.Permanent(fmt.Errorf("Config.Table %q leaves no room for the suffix %q of the table of shared holds: use a name of at most %d bytes",
			d.cfg.Table, sharedSuffix, maxTableName-len(sharedSuffix)))
	}
	return nil
}

// shareRow is one row of the table of shared holds.
type shareRow struct {
	owner     string
	mode      driver.Mode
	weight    int
	limit     int
	queued    int64
	remaining time.Duration
}

// keyRow is the key's row in the lock table, as a shared attempt sees it.
type keyRow struct {
	status, owner string
	version       int64
	live          bool
}

// plain reports whether a plain lock holds the key.
func (k keyRow) plain() bool { return k.status == "RUNNING" && k.live && k.owner != sharedOwner }

// shared reports whether shared holds hold the key.
func (k keyRow) shared() bool { return k.status == "RUNNING" && k.owner == sharedOwner }

// errKeyMissing is lockKey's error when the key has no row, or a live
// first holder holds it.
var errKeyMissing = errors.New("no row, or a first holder's")

// lockKey reads and row-locks the key's row in tx, inserting it free when
// it is missing. It waits for any transaction writing the row, an
// uncommitted insert included. It never locks a row that a live first
// holder holds (lockTx), and returns errKeyMissing for it.
func (d *pgDriver) lockKey(ctx context.Context, tx runner, key string) (keyRow, error) {
	read := func() (keyRow, error) {
		var k keyRow
		found := false
		err := tx.query(ctx, d.shared.lockTx, []any{key}, func(scan func(...any) error) error {
			found = true
			return scan(&k.status, &k.version, &k.owner, &k.live)
		})
		if err == nil && !found {
			err = errKeyMissing
		}
		return k, err
	}
	k, err := read()
	if !errors.Is(err, errKeyMissing) {
		return k, err
	}
	if _, err := tx.exec(ctx, d.shared.insertKey, key); err != nil {
		return keyRow{}, err
	}
	return read()
}

// shareRows reads the key's holders and waiters in tx.
func (d *pgDriver) shareRows(ctx context.Context, tx runner, key string) ([]shareRow, error) {
	var rows []shareRow
	err := tx.query(ctx, d.shared.rows, []any{key}, func(scan func(...any) error) error {
		var (
			r    shareRow
			mode int16
			rem  int64
		)
		if err := scan(&r.owner, &mode, &r.weight, &r.limit, &r.queued, &rem); err != nil {
			return err
		}
		r.mode, r.remaining = driver.Mode(mode), time.Duration(rem)*time.Microsecond
		rows = append(rows, r)
		return nil
	})
	return rows, err
}

// TryAcquireShared implements driver.Sharer. A first attempt on a free
// key is one statement (quickShare); any other is one transaction sent in
// one round trip (run again after a deadlock or serialization failure)
// that locks the key's row, then checks the kind and the limit and grants
// the hold or records the waiter in one statement fenced on the database
// clock (shareAttempt). Waiters wake on the release's notification, or
// poll.
func (d *pgDriver) TryAcquireShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
	if err := d.checkShared(); err != nil {
		return driver.Grant{}, err
	}
	label := d.label
	if req.Label != "" && req.Label != label {
		label = cleanLabel(req.Label)
	}
	for try := 0; ; try++ {
		sent := time.Now()
		var (
			f   driver.Fence // the fence of the attempt's last fenced statement
			g   driver.Grant
			err error = errNotFree
		)
		// A request in line waits on a key shared holds hold: not free.
		_, waiting := d.inLine.LoadAndDelete(lineKey{req.Key, req.Owner})
		if try == 0 && !waiting && (s.Mode != driver.Permits || s.Weight <= s.Limit) {
			g, err = d.quickShare(ctx, req, s, label, &f)
		}
		if errors.Is(err, errNotFree) {
			g, err = d.shareAttempt(ctx, req, s, label, &f)
		}
		switch {
		case err == nil:
			g.Since = sent
			return g, nil
		case errors.Is(err, driver.ErrHeld), errors.Is(err, driver.ErrConflict):
			return driver.Grant{}, err
		case (errors.Is(err, errFenced) || errors.Is(err, errRenewed)) && try < shareAttempts && ctx.Err() == nil:
			continue // rolled back: it took nothing
		case errors.Is(err, errFenced):
			// Every attempt arrived after its fence and took nothing.
			if err := ctx.Err(); err != nil {
				return driver.Grant{}, err
			}
			return driver.Grant{}, lateError("acquire", req.TTL)
		case errors.Is(err, errRenewed):
			return driver.Grant{}, driver.Held(0)
		case retryable(err) && try < shareAttempts:
			if !driver.Sleep(ctx, driver.Jitter(time.Duration(try+1)*time.Millisecond)) {
				return driver.Grant{}, ctx.Err()
			}
			continue
		case retryable(err):
			return driver.Grant{}, driver.Held(0)
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" {
			return driver.Grant{}, driver.Permanent(fmt.Errorf("shared hold: table %s is missing: create it with postgres.SharedTableSQL: %w", d.shared.table, err))
		}
		err = classify(fmt.Errorf("shared hold: %w", err))
		if !definite(err) {
			key, owner := req.Key, req.Owner
			err = &driver.Residue{Err: err, Cleanup: func(ctx context.Context) error {
				if err := d.clock.AwaitFence(ctx, f, d.queryNow); err != nil {
					return fmt.Errorf("undo: %w", classify(err))
				}
				return d.undoShare(ctx, key, owner)
			}}
		}
		return driver.Grant{}, err
	}
}

// errNotFree is quickShare's error when the key was not free.
var errNotFree = errors.New("the key is not free")

// quickShare grants a hold on a free key in one statement, in the key's
// row (see firstStatements.take), setting f to its fence just before it sends it.
// It returns errNotFree when the key was not free, or the statement
// arrived after its fence.
func (d *pgDriver) quickShare(ctx context.Context, req driver.Request, s driver.Share, label string, f *driver.Fence) (driver.Grant, error) {
	*f = d.clock.Fence(ctx, time.Now(), req.TTL)
	var version int64
	found := false
	err := d.q.query(ctx, d.first.take, []any{req.Key, req.Owner, label, ttlMicros(req.TTL), f.Store, int16(s.Mode), s.Weight, s.Limit},
		func(scan func(...any) error) error {
			found = true
			return scan(&version)
		})
	switch {
	case err != nil:
		return driver.Grant{}, err
	case !found:
		return driver.Grant{}, errNotFree
	}
	return driver.Grant{Token: uint64(version), Validity: req.TTL,
		State: &shareState{key: req.Key, owner: req.Owner, token: version, first: true}}, nil
}

// errFenced is the error of an attempt whose fenced statement arrived
// after its fence, and changed nothing.
var errFenced = errors.New("the statement arrived after its fence")

// lateError is the error of an acquisition (op) whose statements all
// arrived after their fences and took nothing, for a lock with this ttl:
// the database, or the way to it (a dial, a pool, a proxy), answers later
// than the fence window. It is no refusal: nobody was seen holding the
// key, and a later try may take it.
func lateError(op string, ttl time.Duration) error {
	return fmt.Errorf("%s: %w every time: the database answered later than the fence window (%v) of a lock with a TTL of %v", op, errFenced, driver.FenceWindow(ttl), ttl)
}

// errRenewed is the error of an attempt rolled back because a hold it
// counted as expired was renewed meanwhile.
var errRenewed = errors.New("a hold counted as expired was renewed")

// queued is the refusal of a request recorded in line: back before the
// record expires, and a Residue that withdraws it.
func (d *pgDriver) queued(req driver.Request, next time.Duration) error {
	if r := req.TTL / 3; next <= 0 || next > r {
		next = r
	}
	key, owner := req.Key, req.Owner
	d.inLine.Store(lineKey{key, owner}, struct{}{})
	return &driver.Residue{Err: driver.Held(next), Cleanup: func(ctx context.Context) error {
		d.inLine.Delete(lineKey{key, owner})
		return d.leave(ctx, d.shared.withdraw, key, owner)
	}}
}

// lineKey names a request of this Locker recorded in line.
type lineKey struct{ key, owner string }

// shareKindOf names the use of a key, for conflict errors.
func shareKindOf(mode driver.Mode, limit int) string {
	if mode == driver.Permits {
		return fmt.Sprintf("a semaphore of %d permits", limit)
	}
	return "a read-write lock"
}

// undoShare deletes owner's live hold or place in line of key, which an
// attempt whose outcome is unknown may have left, and settles the key's
// row; a first holder's row (first.go) it frees with the plain undo. It
// locks the key's row first, so that it runs after the attempt if it is
// still writing. It returns driver.ErrNotHeld when there was nothing to
// delete.
func (d *pgDriver) undoShare(ctx context.Context, key, owner string) error {
	// A first attempt takes the key's row: free it when it is ours.
	n, err := d.freeing(ctx, d.sql.undo, key, firstOwner(owner), d.cfg.Table)
	if err != nil {
		return classify(err)
	}
	if n > 0 {
		return nil
	}
	return d.inShareTx(ctx, key, func(tx runner) (int64, error) {
		return tx.exec(ctx, d.shared.drop+" AND owner_token = $2", key, owner)
	})
}

// leave runs stmt (release or withdraw) for owner's row of key, which
// frees the key's row when it was the last (see leaving). It returns
// driver.ErrNotHeld when there was nothing to delete.
func (d *pgDriver) leave(ctx context.Context, stmt, key, owner string, args ...any) error {
	n, err := d.freeing(ctx, stmt, append([]any{key, owner, d.cfg.Table}, args...)...)
	if err != nil {
		return classify(err)
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// inShareTx runs change in a transaction that holds the key's row, then
// settles the row and notifies the key's waiters. It returns
// driver.ErrNotHeld when the key is not held by shared holds or change
// affected no row.
func (d *pgDriver) inShareTx(ctx context.Context, key string, change func(runner) (int64, error)) error {
	if err := d.checkShared(); err != nil {
		return err
	}
	for try := 0; ; try++ {
		err := d.inTx(ctx, func(tx runner) error {
			k, err := d.lockKey(ctx, tx, key)
			if errors.Is(err, errKeyMissing) {
				// No row, or a first holder's: none in the table of
				// shared holds is live.
				return driver.ErrNotHeld
			}
			if err != nil {
				return err
			}
			if !k.shared() {
				return driver.ErrNotHeld
			}
			n, err := change(tx)
			if err != nil {
				return err
			}
			if n == 0 {
				return driver.ErrNotHeld
			}
			return d.settle(ctx, tx, key)
		})
		if retryable(err) && try < shareAttempts {
			continue
		}
		return classify(err)
	}
}

// settle frees the key's row in tx when no live hold or waiter is left,
// and notifies the key's waiters.
func (d *pgDriver) settle(ctx context.Context, tx runner, key string) error {
	return tx.query(ctx, d.shared.settle, []any{key, d.cfg.Table}, func(func(...any) error) error { return nil })
}
