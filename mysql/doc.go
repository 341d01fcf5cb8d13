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
// New creates the table if it does not exist, and adds lock_data to a
// table made by an earlier version ([Config.SkipMigration] turns both off;
// [AddDataColumnSQL] is the second). Its DDL, for the default name:
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
//	  `lock_data`   VARBINARY(1024) NULL,     -- locker.WithData of the latest holder; NULL: none
//	  PRIMARY KEY (`task_name`)
//	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
//
// # How it works
//
// The row is the lock. Acquire is one conditional UPDATE of a row that is
// free or expired, or an INSERT IGNORE of a missing row; it advances the
// version, which is the fencing token. Renew moves lock_until forward for
// all of a Locker's locks in one UPDATE per 512. Release sets FINISH where
// owner and version match. Every instant is the database's clock
// (UTC_TIMESTAMP(6)), never a replica's.
//
// Waiters line up for a named lock (GET_LOCK), which a release hands to the
// next waiter; the named lock is a wake-up, never the truth. Every
// acquiring statement carries a fence on the database clock, after which it
// takes nothing, so a statement delivered late cannot leave a phantom
// holder. docs/design.md in the repository gives the reasons.
//
// Semaphores and read-write locks (locker.NewSemaphore, locker.NewRWMutex)
// keep a key's first hold in the key's row, as a plain lock does: the
// row is SHARED_ONE, and lock_data holds the hold's mode, weight and
// limit. Taking it on a free row and giving it back are one statement
// each, and giving it back frees the key. Every other holder or waiter
// has a row in a second table, the lock table's name plus "_shared" (its
// DDL: [SharedTableSQL]), and the key's row is SHARED, which a plain
// acquisition never takes. Each attempt then is one transaction that
// locks the key's row, drops the expired holders and waiters, and grants
// the hold or records the waiter in line; a first holder goes to the
// key's row. It never locks a row that holds a live hold: it moves that
// hold into the "_shared" table first, in two statements of their own.
// A hold taken in its key's row looks for itself in the "_shared" table
// first when it renews, and in the row then, so that no renewal waits
// for an attempt; once found there, it releases there too. Every grant
// takes the token after the key's version, and the token becomes the
// key's version, so tokens increase across locks and shared holds. Renewals, releases and withdrawals of holds in the "_shared"
// table change only their own row, found by primary key, never the key's
// row. The key's row stays SHARED when the last holder or waiter there
// leaves, or crashes: the transaction of the next first holder puts it in
// the row once none is live, and the next plain acquisition, and [Purge],
// free the row. The server ends a
// transaction on shared holds whose client stays silent for a third of
// the TTL (in whole seconds, within 1 s and 10 s), and its row-lock waits
// last as long at most, so that a client cut off in the middle of one
// holds up the key's other attempts that long at most. A shared hold has
// its key's named lock taken as a fast-path lock has, and a waiter for a
// shared hold waits for that name on a session of its own, tried again at
// the pace of the Locker's backoff: a release by the holder of the name
// wakes the waiters. A release by another holder, a withdrawn wait, a
// ForceUnlock and SetLimit interrupt the GET_LOCK of the first waiters in
// line with KILL QUERY, found in information_schema.PROCESSLIST, which
// wakes them. With [Config.PollOnly] they poll.
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
//   - Uncontended Lock+Unlock is two round trips, on prepared statements
//     outside GORM's default transaction.
//   - locker.TryLockMulti, and each attempt of a waiting
//     locker.LockMulti, take every key or none. Up to 16 free keys cost
//     one statement (one round trip), and the keys share one token. When
//     a key is not free, one transaction runs one acquiring statement per
//     key, then COMMIT. More than 100 keys are taken one by one.
//   - The Unlock of a locker.MultiLock releases its keys in one statement
//     (driver.MultiReleaser), all or none. When one of them is no longer
//     held, each key is released on its own.
//
// # Limits
//
//   - A waiting Lock rides out database errors (refused or reset
//     connections, timeouts, a restarting server) until its ctx ends; access
//     refusals, a missing table and a closed pool end it at once. Waiters
//     leave nothing in the table; the line is the server's queue of
//     sessions blocked in GET_LOCK, which a waiter leaves when its ctx ends
//     (killed), its wait times out (10 s, less within a shorter
//     readTimeout: one second less than it) or its connection ends. A
//     waiter that crashed holds up nobody. A session cut off from its
//     client stays in line until its wait times out; a name it gets then
//     delays hand-offs as a session that holds the name without the key
//     does (see below).
//   - A Lock or TryLock that gave up while its statement was on the way
//     may have taken the row for nobody: the row stays claimed until its
//     fence passed and the database answers the undo (or, if the Locker
//     is closed first, until its lock_until). A database clock stepped
//     back by more than the fence window in that time can let the
//     statement land after its undo.
//   - Fair (first come, first served) among the Lockers that found the key
//     held lately; a Locker whose first attempt finds the key free takes
//     it, even when others are about to be woken. A wait in line that
//     times out (10 s, see below) lines up again at the end: under a
//     longer hold, waiters may be served out of their arrival order.
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
//     an account's own connections; when it is refused, the wait's
//     connection is closed after 2 s, which ends the wait on MariaDB
//     (on MySQL it ends at its timeout). A change to a semaphore or read-write lock wakes with KILL
//     QUERY only the waiters of the same account (the PROCESSLIST an
//     account without PROCESS sees); others wake at their timeout.
//   - While a [Guard] transaction is open, it holds the lock row: the
//     holder's renewal and other Lockers' attempts on that key (even
//     TryLock) wait for it, up to innodb_lock_wait_timeout (then they count
//     as not acquired) or their ctx. Keep guarded transactions short.
//   - A contended attempt costs three statements (UPDATE, INSERT IGNORE,
//     SELECT of the remaining time); waiters in line make one UPDATE per
//     wake-up and one per check of the table.
//   - Each Locker keeps one connection of the pool for its renewals,
//     from New on, so that the caller's own slow queries on every other
//     connection do not hold them back past the locks' validity; a
//     broken one is replaced within the renewal that found it. With
//     MaxOpenConns below 4 renewals use the pool like other statements.
//   - Wake-ups cost one pooled connection per Locker for its fast-path
//     locks, and one per Lock or shared hold waiting, at most 16 per
//     Locker (a quarter of MaxOpenConns when set); more waiters poll.
//     A Lock in line checks the table at the Locker's backoff, every
//     500 ms to 1 s, and takes a row that has been free for 500 ms, so a
//     session that holds a key's named lock without the key delays a
//     hand-off by 0.5 to 1.5 s. A waiter for a shared hold waits the
//     Locker's backoff step (on MySQL, which rounds GET_LOCK timeouts,
//     1 s).
//   - A key is one kind of lock at a time: a plain lock, a semaphore of
//     one limit or a read-write lock; asking for another kind fails with
//     locker.ErrInvalidOption while the key has holders.
//   - Semaphores and read-write locks need a lock table name of at most
//     57 bytes, to leave room for the "_shared" suffix. A shared attempt
//     costs one transaction of four to six statements, plus one that
//     sets the session's wait_timeout and innodb_lock_wait_timeout before
//     it and one that restores them after it returned; a first holder of
//     a key whose row is free costs one statement. A release costs one
//     statement. A second holder that finds the first in the key's row
//     costs two statements more. A renewal tick costs one statement more
//     while a Locker holds a shared hold in its key's row. On MySQL (not
//     MariaDB), a hold moved out of its key's row that releases or keeps
//     before its next renewal may wait for an attempt cut off from its
//     client as long as the server keeps that attempt's session. The first
//     plain lock of a key after shared holds costs a transaction more. The
//     transactions run at READ COMMITTED, which binlog_format=STATEMENT
//     refuses for writes (MIXED and ROW accept it).
//   - The owner label is cut to 255 characters.
//   - A lock's data (locker.WithData) is in lock_data, which a table made
//     by an earlier version lacks: New adds it ([AddDataColumnSQL]).
//   - MySQL 5.7+ or MariaDB 10.0.2+ (several named locks per session);
//     tested on MariaDB 10.11.
//
// # Testing
//
// [SQL] and [Statements] exist for benchmarks in other modules that time the
// library against the bare statements it runs. They are not for locking:
// use a Locker.
package mysql
