package mysql

import (
	"strconv"
	"strings"
)

// The SQL of the driver. Every instant comes from the database's clock
// through UTC_TIMESTAMP(6) (never a replica's clock, never NOW(6), which
// follows the session's time_zone: two sessions with different time zones
// would disagree about whether a lock expired). Statements are built once
// per table name, which New validated ([A-Za-z0-9_] only), and prepared.

// dbNow is the database clock, in UTC, with microseconds.
const dbNow = "UTC_TIMESTAMP(6)"

// epochMicros is the database clock in microseconds since the Unix epoch,
// independent of the session's time zone. A new row starts its version
// there, so that a deleted and recreated row never hands out a lower
// fencing token (see the package doc, Fencing).
const epochMicros = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + dbNow + ")"

// micros renders a DATETIME(6) column as microseconds since the epoch (NULL
// stays NULL), so that reading it depends neither on the DSN's parseTime and
// loc nor on the session's time zone.
func micros(col string) string {
	return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ")"
}

// untilExpr is the lock-until instant of a lock taken or renewed now for a
// TTL given in microseconds by the placeholder.
const untilExpr = "TIMESTAMPADD(MICROSECOND, ?, " + dbNow + ")"

// beforeFence is true while the database clock is before the fence given
// in microseconds since the epoch by the placeholder: an acquiring
// statement that reaches the server later takes nothing (see fence.go).
const beforeFence = dbNow + " < TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')"

// statements holds the SQL texts for one table.
type statements struct {
	table string // quoted
	// acquire takes an existing row that is free or expired, unless the
	// fence passed; a row marked as held by shared holds (SHARED) only
	// after settling. Args: owner, label, data, ttl µs, key, fence µs.
	acquire string
	// acquireIdle is acquire of a row that has been free (released or
	// expired) for idleFor at least. Args: those of acquire.
	acquireIdle string
	// insert creates a missing row, already taken, unless the fence
	// passed. Args: key, owner, label, data, ttl µs, fence µs.
	insert string
	// setData replaces the holder's data. Args: data, key, owner, version.
	setData string
	// remaining reads how long the holder's claim still runs (µs; NULL or
	// negative when the row is free or missing), the database clock (µs
	// since the epoch), and whether shared holds hold the key. Args: key.
	remaining string
	// now reads the database clock (µs since the epoch).
	now string
	// release gives the row up. Args: key, owner, version.
	release string
	// releaseNamed is release, also giving up the key's named lock held by
	// the session that runs it, while the statement holds the row: a
	// waiter woken by it waits for the row until the statement commits.
	// Args: name, key, owner, version.
	releaseNamed string
	// undo gives up a row this owner may hold after an acquisition whose
	// outcome is unknown. Args: key, owner.
	undo string
	// inspect reads the run record. Args: key.
	inspect string
	// guard reads and row-locks the lock row. Args: key.
	guard string
	// keep ends a run but leaves the row RUNNING until a point (MinHold).
	// Args: remaining µs, key, owner, version.
	keep string
	// force gives the row up whoever holds it, a plain lock or a
	// shared hold in the row (locker.ForceUnlock). Args: key.
	force string
}

// Statements are SQL statements a Locker on a lock table runs, for benchmarks
// that must run the same ones (see the package doc, Testing). Each acquiring
// statement takes a fence, in µs since the epoch on the database clock,
// as its last argument.
type Statements struct {
	// Acquire takes an existing row. Args: owner, label, data (nil: none),
	// TTL in µs, key. LAST_INSERT_ID() is then the fencing token.
	Acquire string
	// Insert creates a missing row, taken. Args: key, owner, label, data,
	// TTL in µs.
	Insert string
	// Release gives a row back. Args: key, owner, token.
	Release string
	// Hold takes the first shared hold of a key, in the key's row. Args:
	// owner, label, kind (mode, weight and limit in decimal, separated by
	// spaces: "1 1 4" for one permit of a semaphore of 4), TTL in µs, key.
	// It affects 1 row when it takes the hold; LAST_INSERT_ID() is then
	// the fencing token.
	Hold string
	// Leave ends a hold that Hold took. Args: key, owner, token.
	Leave string
}

// SQL returns the statements a Locker runs on lock table table.
func SQL(table string) Statements {
	s := newStatements(table)
	return Statements{Acquire: s.acquire, Insert: s.insert, Release: s.release,
		Hold: takeRowSQL(s.table), Leave: soleReleaseSQL(s.table)}
}

func newStatements(table string) statements {
	t := "`" + table + "`"
	acquire := "UPDATE " + t + " SET task_status = 'RUNNING', version = LAST_INSERT_ID(version + 1)," +
		" owner_token = ?, owner_label = ?, lock_data = ?, start_time = " + dbNow + ", finish_time = NULL," +
		" lock_until = " + untilExpr + ", update_time = " + dbNow +
		" WHERE task_name = ? AND " + acquireFree + " AND "
	return statements{
		table:   t,
		acquire: acquire + beforeFence,
		acquireIdle: acquire + "lock_until <= TIMESTAMPADD(MICROSECOND, -" + strconv.FormatInt(idleFor.Microseconds(), 10) + ", " + dbNow + ")" +
			" AND " + beforeFence,
		insert: "INSERT IGNORE INTO " + t +
			" (task_name, task_status, version, owner_token, owner_label, lock_data, lock_until, start_time, update_time)" +
			" SELECT ?, 'RUNNING', LAST_INSERT_ID(" + epochMicros + "), ?, ?, ?, " + untilExpr + ", " + dbNow + ", " + dbNow +
			" FROM DUAL WHERE " + beforeFence,
		remaining: "SELECT r.rem, " + epochMicros + ", r.status IN ('" + sharedStatus + "', '" + soleStatus + "') FROM (SELECT NULL) AS dual_" +
			" LEFT JOIN (SELECT IF(task_status IN ('RUNNING', '" + sharedStatus + "', '" + soleStatus + "'), TIMESTAMPDIFF(MICROSECOND, " + dbNow + ", lock_until), -1) AS rem," +
			" task_status AS status FROM " + t + " WHERE task_name = ?) AS r ON TRUE",
		now: "SELECT " + epochMicros,
		release: "UPDATE " + t + " SET task_status = 'FINISH', finish_time = " + dbNow + ", lock_until = " + dbNow +
			", update_time = " + dbNow +
			" WHERE task_name = ? AND owner_token = ? AND version = ? AND task_status = 'RUNNING'",
		releaseNamed: "UPDATE " + t + " SET task_status = 'FINISH', finish_time = " + dbNow + ", lock_until = " + dbNow +
			", update_time = IF(RELEASE_LOCK(?) IS NULL, " + dbNow + ", " + dbNow + ")" +
			" WHERE task_name = ? AND owner_token = ? AND version = ? AND task_status = 'RUNNING'",
		keep: "UPDATE " + t + " SET finish_time = " + dbNow + ", lock_until = " + untilExpr + ", update_time = " + dbNow +
			" WHERE task_name = ? AND owner_token = ? AND version = ? AND task_status = 'RUNNING'",
		undo: "UPDATE " + t + " SET task_status = 'FINISH', finish_time = " + dbNow + ", lock_until = " + dbNow +
			", update_time = " + dbNow +
			" WHERE task_name = ? AND owner_token = ? AND task_status = 'RUNNING'",
		force: "UPDATE " + t + " SET lock_data = IF(task_status = '" + soleStatus + "', NULL, lock_data), task_status = 'FINISH'," +
			" finish_time = " + dbNow + ", lock_until = " + dbNow + ", update_time = " + dbNow +
			" WHERE task_name = ? AND task_status IN ('RUNNING', '" + soleStatus + "') AND lock_until > " + dbNow,
		inspect: "SELECT " + runColumns + " FROM " + t + " WHERE task_name = ?",
		setData: "UPDATE " + t + " SET lock_data = ?, update_time = " + dbNow +
			" WHERE task_name = ? AND owner_token = ? AND version = ? AND task_status = 'RUNNING' AND lock_until > " + dbNow,
		guard: "SELECT owner_token, version, task_status, lock_until > " + dbNow +
			" FROM " + t + " WHERE task_name = ? FOR UPDATE",
	}
}

// runColumns are the columns of a run record that scanRunRow reads.
var runColumns = "task_status, version, owner_label, " + micros("start_time") + ", " + micros("finish_time") +
	", " + micros("update_time") + ", " + micros("lock_until") + ", lock_until > " + dbNow + ", lock_data"

// renewSQL renews n leases in one statement, plain locks and shared holds
// in their key's row alike. The task_name IN list lets the
// optimizer read the rows by primary key; the row constructor list checks
// owner and version. Args: ttl µs, n keys, then n (key, owner, version).
func (s statements) renewSQL(n int) string {
	var b strings.Builder
	b.WriteString("UPDATE ")
	b.WriteString(s.table)
	b.WriteString(" SET lock_until = " + untilExpr + ", update_time = " + dbNow + " WHERE task_name IN (")
	placeholders(&b, n, "?")
	b.WriteString(") AND (task_name, owner_token, version) IN (")
	placeholders(&b, n, "(?, ?, ?)")
	b.WriteString(") AND " + renewable + " AND lock_until > " + dbNow)
	return b.String()
}

// renewable is true on a row held by a plain lock, or by a shared hold in
// the row that was not given up with a MinHold left.
const renewable = "(task_status = 'RUNNING' OR task_status = '" + soleStatus + "' AND finish_time IS NULL)"

// liveSQL lists which of n rows are held and renewable, with their owner
// and version. Args: n keys.
func (s statements) liveSQL(n int) string {
	return s.rowsSQL(n, renewable+" AND lock_until > "+dbNow)
}

// rowsSQL lists which of n rows meet cond, with their owner and version.
// Args: n keys.
func (s statements) rowsSQL(n int, cond string) string {
	var b strings.Builder
	b.WriteString("SELECT task_name, owner_token, version FROM ")
	b.WriteString(s.table)
	b.WriteString(" WHERE task_name IN (")
	placeholders(&b, n, "?")
	b.WriteString(") AND " + cond)
	return b.String()
}

// acquireFree is true on a row that a plain lock or a key's first shared
// hold may take: neither held (RUNNING or SHARED_ONE, unexpired) nor
// marked as held by shared holds (SHARED).
const acquireFree = "(task_status NOT IN ('RUNNING', '" + sharedStatus + "', '" + soleStatus + "') OR task_status IN ('RUNNING', '" + soleStatus + "') AND lock_until <= " + dbNow + ")"

// refuse is an expression that fails the statement that evaluates it with
// error 1690 (BIGINT UNSIGNED out of range), whatever the sql_mode: the
// server then rolls the whole statement back. It reads the row's version
// so that the server cannot evaluate it before the row.
const refuse = "~0 + (version | 1)"

// errRefused is the MySQL error number of refuse.
const errRefused = 1690

// multiSQL takes n keys for their owners in one statement, all or none:
// it creates the missing rows and takes the existing ones, and fails with
// refuse when any of them is not free, or carries a version not below the
// new one. Every row gets the same version, LAST_INSERT_ID(): the database
// clock in µs since the epoch, so each key's token still grows. A passed
// fence empties the SELECT: then the statement changes nothing.
// Args: label, ttl µs, then n (key, owner), then fence µs.
func (s statements) multiSQL(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + s.table +
		" (task_name, task_status, version, owner_token, owner_label, lock_data, lock_until, start_time, finish_time, update_time)" +
		" SELECT r.k, 'RUNNING', LAST_INSERT_ID(" + epochMicros + "), r.o, ?, NULL, " + untilExpr + ", " + dbNow + ", NULL, " + dbNow +
		" FROM (")
	for i := range n {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString("SELECT ? AS k, ? AS o")
	}
	b.WriteString(") AS r WHERE " + beforeFence +
		// The version goes first: the later assignments change columns
		// that acquireFree reads.
		" ON DUPLICATE KEY UPDATE version = IF(" + acquireFree + " AND version < VALUES(version), VALUES(version), " + refuse + ")," +
		" task_status = 'RUNNING', owner_token = VALUES(owner_token), owner_label = VALUES(owner_label), lock_data = NULL," +
		" start_time = " + dbNow + ", finish_time = NULL, lock_until = VALUES(lock_until), update_time = " + dbNow)
	return b.String()
}

// releaseSQL releases n rows in one statement, all or none: it fails with
// refuse when any of the keys' rows is not RUNNING for its owner and
// version. A missing row is not changed. Args: n (key, owner, version),
// then the n keys.
func (s statements) releaseSQL(n int) string {
	var b strings.Builder
	b.WriteString("UPDATE " + s.table + " SET version = IF(task_status = 'RUNNING' AND (task_name, owner_token, version) IN (")
	placeholders(&b, n, "(?, ?, ?)")
	b.WriteString("), version, " + refuse + "), task_status = 'FINISH', finish_time = " + dbNow + ", lock_until = " + dbNow +
		", update_time = " + dbNow + " WHERE task_name IN (")
	placeholders(&b, n, "?")
	b.WriteString(")")
	return b.String()
}

// releasedSQL lists which of n rows are no longer RUNNING, with their
// owner and version. Args: n keys.
func (s statements) releasedSQL(n int) string { return s.rowsSQL(n, "task_status <> 'RUNNING'") }

func placeholders(b *strings.Builder, n int, p string) {
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p)
	}
}
