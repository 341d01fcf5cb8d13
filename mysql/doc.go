// Package mysql is the MySQL/MariaDB locker backend, on the caller's own GORM
// handle: a task-lock table with one row per key, whose version column is
// advanced by a conditional UPDATE and handed out as the fencing token. The
// row also keeps a record of each task's last run.
//
//	db, _ := gorm.Open(gormmysql.Open(dsn), &gorm.Config{})
//	l, err := mysql.New(db, locker.WithTTL(30*time.Second))
//	…
//	err = locker.TryDo(ctx, l, "nightly-report", runReport)
//
// New creates the table if it does not exist ([Config.SkipMigration] turns
// that off). Its DDL, for the default name:
//
//	CREATE TABLE IF NOT EXISTS `distribute_task_lock` (
//	  `task_name`   VARBINARY(255)  NOT NULL, -- key, prefix included; compared byte by byte
//	  `task_status` VARCHAR(16)     NOT NULL, -- RUNNING while held, FINISH once released
//	  `version`     BIGINT UNSIGNED NOT NULL, -- fencing token of the latest acquisition
//	  `owner_token` VARBINARY(64)   NOT NULL, -- random token of the holder, per acquisition
//	  `owner_label` VARCHAR(255)    NOT NULL, -- human-readable holder, e.g. host:pid
//	  `lock_until`  DATETIME(6)     NOT NULL, -- UTC; the claim ends then unless renewed
//	  `start_time`  DATETIME(6)     NULL,     -- UTC; start of the latest run
//	  `finish_time` DATETIME(6)     NULL,     -- UTC; its release (NULL: running, or never released)
//	  `update_time` DATETIME(6)     NOT NULL, -- UTC; last acquisition, renewal or release
//	  PRIMARY KEY (`task_name`)
//	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
//
// # How it works
//
// Acquire: one conditional UPDATE takes an existing row when it is not
// RUNNING or its lock_until has passed, setting RUNNING, the owner token and
// label, start_time, lock_until = now + TTL and version = version + 1 (read
// back in the same round trip through LAST_INSERT_ID(expr)). Exactly one
// affected row means acquired. A missing row is created already taken by
// INSERT IGNORE (no duplicate-key error when another replica creates it
// first). Uncontended: one round trip for a known key, two for a new one.
// When both statements affect nothing, one SELECT reads the holder's
// remaining time, so that waiters never sleep past it.
//
// Every acquiring statement carries a fence, an instant of the database
// clock after which it takes nothing: a quarter of the TTL after it was
// sent (at least 250 ms, at most 2 s), or the call's ctx deadline if
// sooner. The Locker maps its own clock to the database's through readings
// of UTC_TIMESTAMP(6). A statement whose outcome is unknown (its ctx ended,
// its connection broke) is undone in the background once the database
// clock has passed its fence, retried until the database answers. So a
// statement that a healed partition delivers late, after the caller gave
// up, finds either its fence passed or its undo still to come.
//
// Renew moves lock_until forward where key, owner and version still match:
// all the locks a Locker holds in one UPDATE per 512 (two statements per
// renewal tick for 1,000 held locks), plus one SELECT when some lock did not
// match, to tell which were lost. Release sets FINISH and finish_time where
// owner and version match.
//
// Every instant is the database's clock (UTC_TIMESTAMP(6)): expiry never
// depends on a replica's clock, so skewed replicas cannot both believe a
// lock expired. UTC_TIMESTAMP rather than NOW: NOW follows each session's
// time_zone, and two sessions in different zones (or one across a daylight
// saving change) would disagree about expiry.
//
// Waiting: waiters of a contended key line up for a MariaDB/MySQL named lock
// (GET_LOCK), each on a connection of its own; the server queues them in
// arrival order. The first in line gets the name when the holder lets it go,
// in its release UPDATE (RELEASE_LOCK is evaluated once the statement holds
// the row: the woken waiter's UPDATE waits for the row until the release
// commits), takes the row with one UPDATE and keeps the name while it holds
// the row: a release wakes exactly the next waiter, nobody polls, and a
// Locker that locks the key again right after its Unlock lines up behind
// the others instead of taking the key back (a key counts as
// contended for a Locker from the moment it found it held until a second
// after its last acquisition from the line; other keys take the fast path,
// one UPDATE, whose holder's Locker takes the name 5 ms later, so a
// Lock+Unlock shorter than that sends no named-lock statement at all). A
// cancelled wait is killed in the server (KILL QUERY on its own connection)
// before Lock returns, so the name is never granted to a waiter that gave up.
//
// The named lock is only an order and a wake-up signal, never a source of
// truth: when it is missing or wrong (a crashed holder, a broken connection,
// a TryLock holder that has not taken it) the first in line finds the row
// held, gives the name back and lines up again after a polling step, never
// sleeping past the holder's lock_until. Nor is it ever a reason to wait
// much longer than polling would: each GET_LOCK waits the Locker's next
// backoff step (locker.WithBackoff), at least 500 ms so that waiters keep
// their place in line and at most 1 s, and then the waiter tries the table,
// so a session that holds a key's named lock without holding the key (the
// names are predictable, and GET_LOCK needs no privilege) delays a hand-off
// by about that much. MySQL rounds GET_LOCK timeouts to whole seconds: there
// a wait is 1 s. It costs one pooled connection per Locker while it holds
// fast-path locks (all their named locks share it) and one per Lock call
// waiting in line or holding what it got from the line, at most 16 per
// Locker (a quarter of the pool's MaxOpenConns when set), returned to the
// pool after 10 s idle; more waiters poll. [Config.PollOnly] turns it off.
//
// Measured on MariaDB 10.11 over loopback, on a 2-core machine at load 6–9,
// one run of integration/mysql BenchmarkScenarios (the implementations
// alternate in rounds): clients on one key, hand-offs/s at 4 / 16 / 64
// clients 1,461 / 1,260 / 1,537, per-client min/max 0.96 / 0.94 / 0.85,
// wait p99 8 / 30 / 148 ms; the raw poller (the same UPDATE every
// millisecond) 1,253 / 472 / 74, and the previous wake-ups (every waiter
// woken to race for the row, polling while the holder had no named lock)
// 1,377 / 684 / 62, min/max 0.06 at 16 clients, p99 483 ms. Hand-off from
// Unlock to the waiter's Lock returning: 1.6 ms p50.
//
// # Guarantees
//
//   - Mutual exclusion as strong as the database: the row is the lock, and
//     every transition is one atomic conditional statement judged by the
//     database's clock. A holder that cannot reach the database loses the
//     lock (Done closes) before its lock_until passes.
//   - Fencing tokens (the version) strictly increase per key, across
//     Lockers, processes, releases and expiries. A new row starts at the
//     database clock in microseconds since the epoch, so even a deleted
//     row's recreated successor hands out higher tokens (unless the
//     database clock steps back by more than the time between them).
//   - [Guard] makes a GORM transaction commit only while its lock is held:
//     fencing enforced by the store, with no token column on your tables.
//   - The row records the latest run: state, holder label, start, finish
//     and update times, readable with [LastRun]. A RUNNING row that is no
//     longer held is a run that never released (crashed or lost).
//   - Uncontended Lock+Unlock is two round trips (prepared statements on
//     db's pool, outside GORM's default transaction), within 1.3× the same
//     SQL issued directly through database/sql.
//
// # Limits
//
//   - A waiting Lock rides out database errors (refused or reset
//     connections, timeouts, a restarting server) until its ctx ends; access
//     refusals, a missing table and a closed pool end it at once. Waiters
//     leave nothing in the table; the line is the server's queue of
//     sessions blocked in GET_LOCK, which a waiter leaves when its ctx ends
//     (killed), its wait times out (1 s at most) or its connection ends: a
//     waiter that crashed holds up nobody.
//   - A Lock or TryLock that gave up while its statement was on the way
//     may have taken the row for nobody: the row stays claimed until its
//     fence passed and the database answers the undo (or, if the Locker
//     is closed first, until its lock_until). A database clock stepped
//     back by more than the fence window in that time can let the
//     statement land after its undo.
//   - Fair (first come, first served) among the Lockers that found the key
//     held lately; a Locker whose first attempt finds the key free takes
//     it, even when others are about to be woken.
//   - Keys longer than [MaxKeyBytes] (255 bytes, prefix included) are
//     rejected with locker.ErrInvalidKey naming the limit; hash longer
//     natural keys. Keys are compared byte by byte: "a", "A" and "a " are
//     three keys.
//   - A primary failover that loses committed transactions (asynchronous
//     replication) can lose a lock, as it loses any write. Point db at the
//     primary: a read replica cannot take locks.
//   - A Locker never deletes rows: one row per key ever locked (about 200
//     bytes). Where keys are unbounded (one per order), run [Purge] from
//     time to time: it deletes the rows idle for a given time, and tokens
//     keep increasing across it (see Guarantees).
//   - The release UPDATE of a lock taken from the line calls RELEASE_LOCK:
//     with binlog_format=STATEMENT the server logs it as unsafe for
//     statement-based replication (MIXED, MariaDB's default, and ROW,
//     MySQL's, log the changed row instead).
//   - Wake-ups need named locks to stay with their session: behind a proxy
//     that multiplexes connections (ProxySQL), set [Config.PollOnly]. The
//     Locker reads db's readTimeout from GORM's DSN config: below 2 s,
//     waiters poll instead of blocking in GET_LOCK. Waiters kill their own
//     cancelled GET_LOCK with KILL QUERY, which MySQL and MariaDB allow on
//     an account's own connections; when it is refused, the wait ends at
//     its timeout (1 s at most) or, on MariaDB, when the connection
//     closes.
//   - While a [Guard] transaction is open, it holds the lock row: the
//     holder's renewal and other Lockers' attempts on that key (even
//     TryLock) wait for it, up to innodb_lock_wait_timeout (then they count
//     as not acquired) or their ctx. Keep guarded transactions short.
//   - A contended attempt costs three statements (UPDATE, INSERT IGNORE,
//     SELECT of the remaining time); waiters make one per wake-up.
//   - The owner label is cut to 255 characters.
//   - MySQL 5.7+ or MariaDB 10.0.2+ (several named locks per session);
//     tested on MariaDB 10.11.
//
// # Testing
//
// [SQL] and [Statements] exist for benchmarks in other modules that time the
// library against the bare statements it runs. They are not for locking:
// use a Locker.
package mysql
