package postgres

// The SQL of the driver. Every instant comes from the database's clock,
// clock_timestamp() (never now(), which stands still for a whole
// transaction). Statements are built once per table name, which New
// validated, and the name is always quoted.

// dbNow is the database clock.
const dbNow = "clock_timestamp()"

// beforeFence is true while the database clock is before the fence given
// in microseconds since the epoch by $5: an acquiring statement that
// reaches the server later takes nothing (see fence.go).
const beforeFence = dbNow + " < timestamptz 'epoch' + $5::float8 * interval '1 microsecond'"

// micros renders a timestamptz as microseconds since the epoch (NULL stays
// NULL), so that reading it depends on no session time zone.
func micros(col string) string {
	return "floor(extract(epoch FROM " + col + ") * 1000000)::bigint"
}

// statements holds the SQL texts for one table.
type statements struct {
	// acquire takes the row when it is missing, free or expired, in one
	// statement, unless the fence passed or the key is held by shared
	// holds. It returns one row: the version taken or NULL, the holder's
	// remaining µs or NULL (none, or the holder's row is not visible yet),
	// the database clock (µs since the epoch), and whether the key is
	// held by shared holds, its first holder (first.go) included. Args: key, owner, label, ttl µs, fence µs,
	// data.
	acquire string
	// setData replaces the holder's data. Args: data, key, owner, version.
	setData string
	// now reads the database clock (µs since the epoch).
	now string
	// release frees the row and notifies the waiters, returning one row
	// when it was ours. Args: key, owner, version, channel.
	release string
	// undo frees a row this owner may hold after an acquisition whose
	// outcome is unknown. Its ON CONFLICT locks the row before it compares
	// the owner, so it waits for a statement still writing the row, an
	// insert of a missing row included; it inserts a missing row free.
	// It returns one row when it freed the row. Args: key, owner, channel.
	undo string
	// keep ends a run but leaves the row claimed for a while (MinHold).
	// Args: remaining µs, key, owner, version.
	keep string
	// force frees the row whoever holds it with a plain lock. Args: key,
	// channel.
	force string
	// renew renews many leases in one statement and returns the renewed
	// rows. Args: keys, owners, versions, ttls µs (arrays).
	renew string
	// inspect reads the row, whether shared holds hold it, its data, and
	// whether a first holder holds it (first.go). Args: key.
	inspect string
	// guard reads and row-locks the row. Args: key.
	guard string
}

// quoteIdent quotes a validated identifier.
func quoteIdent(name string) string { return `"` + name + `"` }

func newStatements(table string) statements {
	t := quoteIdent(table)
	until := dbNow + " + $4::float8 * interval '1 microsecond'"
	free := "task_status = 'FINISH', finish_time = " + dbNow + ", lock_until = " + dbNow + ", update_time = " + dbNow
	return statements{
		acquire: "WITH a AS (INSERT INTO " + t + " AS l" +
			" (task_name, task_status, version, owner_token, owner_label, lock_until, start_time, update_time, lock_data)" +
			" SELECT $1::text, 'RUNNING', " + micros(dbNow) + ", $2::text, $3::text, " + until + ", " + dbNow + ", " + dbNow + ", $6::bytea" +
			" WHERE " + beforeFence +
			" ON CONFLICT (task_name) DO UPDATE SET task_status = 'RUNNING', version = l.version + 1," +
			" owner_token = EXCLUDED.owner_token, owner_label = EXCLUDED.owner_label, lock_until = EXCLUDED.lock_until," +
			" start_time = EXCLUDED.start_time, finish_time = NULL, update_time = EXCLUDED.update_time, lock_data = EXCLUDED.lock_data" +
			" WHERE (l.task_status <> 'RUNNING' OR l.lock_until <= " + dbNow + ") AND l.owner_token <> " + sharedOwnerSQL +
			" AND " + beforeFence +
			" RETURNING l.version)" +
			" SELECT (SELECT version FROM a), (SELECT CASE WHEN task_status = 'RUNNING' THEN " +
			micros("lock_until") + " - " + micros(dbNow) + " END" +
			" FROM " + t + " WHERE task_name = $1::text AND NOT EXISTS (SELECT 1 FROM a)), " + micros(dbNow) +
			", (SELECT owner_token = " + sharedOwnerSQL + " OR " + firstLive("") + " FROM " + t + " WHERE task_name = $1::text AND NOT EXISTS (SELECT 1 FROM a))",
		now: "SELECT " + micros(dbNow),
		release: "WITH r AS (UPDATE " + t + " SET " + free +
			" WHERE task_name = $1 AND owner_token = $2 AND version = $3 AND task_status = 'RUNNING' RETURNING task_name)" +
			" SELECT pg_notify($4, task_name)::text FROM r",
		undo: "WITH r AS (INSERT INTO " + t + " AS l" +
			" (task_name, task_status, version, owner_token, owner_label, lock_until, update_time)" +
			" VALUES ($1::text, 'FINISH', " + micros(dbNow) + ", '', '', " + dbNow + ", " + dbNow + ")" +
			" ON CONFLICT (task_name) DO UPDATE SET " + free +
			" WHERE l.owner_token = $2::text AND l.task_status = 'RUNNING' RETURNING l.task_name, l.owner_token)" +
			" SELECT pg_notify($3, task_name)::text FROM r WHERE owner_token = $2::text",
		keep: "UPDATE " + t + " SET finish_time = " + dbNow + ", lock_until = " + dbNow + " + $1::float8 * interval '1 microsecond'," +
			" update_time = " + dbNow +
			" WHERE task_name = $2 AND owner_token = $3 AND version = $4 AND task_status = 'RUNNING'",
		force: "WITH r AS (UPDATE " + t + " SET " + free +
			" WHERE task_name = $1 AND task_status = 'RUNNING' AND lock_until > " + dbNow +
			" AND owner_token <> " + sharedOwnerSQL + " RETURNING task_name)" +
			" SELECT pg_notify($2, task_name)::text FROM r",
		renew: "UPDATE " + t + " AS l SET lock_until = " + dbNow + " + r.ttl::float8 * interval '1 microsecond'," +
			" update_time = " + dbNow +
			" FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS r(task_name, owner_token, version, ttl)" +
			" WHERE l.task_name = r.task_name AND l.owner_token = r.owner_token AND l.version = r.version" +
			" AND l.task_status = 'RUNNING' AND l.lock_until > " + dbNow +
			" RETURNING l.task_name, l.owner_token, l.version",
		inspect: "SELECT task_status, version, owner_label, " + micros("start_time") + ", " + micros("lock_until") +
			", lock_until > " + dbNow + ", owner_token = " + sharedOwnerSQL + ", lock_data, starts_with(owner_token, " + firstPrefixSQL + ")" +
			" FROM " + t + " WHERE task_name = $1",
		setData: "UPDATE " + t + " SET lock_data = $1, update_time = " + dbNow +
			" WHERE task_name = $2 AND owner_token = $3 AND version = $4 AND task_status = 'RUNNING' AND lock_until > " + dbNow,
		guard: "SELECT owner_token, version, task_status, lock_until > " + dbNow +
			" FROM " + t + " WHERE task_name = $1 FOR UPDATE",
	}
}
