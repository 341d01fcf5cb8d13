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
// Renew moves lock_until forward where key, owner and version still match:
// all the locks a Locker holds in one UPDATE per 512 (two statements per
// renewal tick for 1,000 held locks), plus one SELECT when some lock did not
// match, to tell which were lost. Release sets FINISH and finish_time where
// owner and version match.
//
// Every instant is the database's clock (UTC_TIMESTAMP(6)): no replica's
// clock is ever sent or compared, so skewed replicas cannot both believe a
// lock expired. UTC_TIMESTAMP rather than NOW: NOW follows each session's
// time_zone, and two sessions in different zones (or one across a daylight
// saving change) would disagree about expiry.
//
// Waiting: a waiter blocks on a MariaDB/MySQL named lock (GET_LOCK) that the
// holder's Locker holds while it holds the row and releases right after the
// release UPDATE; the waiter is woken within a millisecond and tries the
// table again. The named lock is only a wake-up signal, never a source of
// truth: when it is missing or wrong (a crashed holder, a broken connection)
// waiters fall back to polling with backoff, never sleeping past the holder's
// lock_until. Nor is it ever a reason to wait longer than polling would: each
// GET_LOCK waits at most the Locker's next backoff step (locker.WithBackoff)
// and then the waiter tries the table, so a session that holds a key's named
// lock without holding the key (the names are predictable, and GET_LOCK
// needs no privilege) delays a hand-off by a backoff step at most. Measured
// with a USAGE-only account holding the name, on a loaded machine: hand-offs
// of 0.04–0.50 s at the default backoff (at most 0.5 s), 0.01–0.15 s at a
// constant 100 ms; with the former fixed 1 s wait 0.14–0.84 s, and before
// that the holder's whole TTL. MySQL rounds GET_LOCK timeouts to whole
// seconds: there a wait is 1 s. It costs one pooled connection per Locker
// while it holds locks (all its named locks share it) and one per waiting
// Lock call, at most 16 per Locker (a quarter of the pool's MaxOpenConns when
// set); more waiters poll. A Lock+Unlock shorter than 5 ms sends no
// named-lock statement at all.
// [Config.PollOnly] turns it off. Measured on MariaDB 10.11 over loopback:
// hand-off from Unlock to the waiter's Lock returning 1.3 ms p50 (polling:
// 10–12 ms).
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
//   - The row records the latest run: status, holder label, start, finish
//     and update times, readable with [Inspect]. A RUNNING row that is no
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
//     poll and leave nothing in the table: a waiter that crashed holds up
//     nobody.
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
//   - Wake-ups need named locks to stay with their session: behind a proxy
//     that multiplexes connections (ProxySQL), set [Config.PollOnly]. The
//     Locker reads db's readTimeout from GORM's DSN config: below 2 s,
//     waiters poll instead of blocking in GET_LOCK.
//   - While a [Guard] transaction is open, it holds the lock row: the
//     holder's renewal and other Lockers' attempts on that key (even
//     TryLock) wait for it, up to innodb_lock_wait_timeout (then they count
//     as not acquired) or their ctx. Keep guarded transactions short.
//   - A contended attempt costs three statements (UPDATE, INSERT IGNORE,
//     SELECT of the remaining time); waiters make one per wake-up.
//   - The owner label is cut to 255 characters.
//   - MySQL 5.7+ or MariaDB 10.0.2+ (several named locks per session);
//     tested on MariaDB 10.11.
package mysql
