// Package postgres is a locker backend on PostgreSQL through pgx v5: a lock
// is a row of a lease table, taken, renewed and released on the database's
// clock.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db:5432/app")
//	l, err := postgres.New(pool, locker.WithTTL(30*time.Second))
//
// [New] takes a *pgxpool.Pool, [NewDB] a *sql.DB opened with pgx/stdlib
// (GORM users pass gormDB.DB()). The Locker never closes either.
//
// # Guarantees
//
// The lease row is the truth. No lock state lives in a session: a holder
// keeps its lock while its connections are recycled, terminated or pooled,
// as long as its renewals get through.
//
// Acquire is one statement: INSERT … ON CONFLICT (task_name) DO UPDATE …
// WHERE the row is free or its lock_until has passed on the database clock
// (clock_timestamp()). Exactly one of many Lockers racing the first insert
// of a key gets it. Sessions at SERIALIZABLE are supported: a statement
// rolled back with SQLSTATE 40001 or 40P01 runs again within the attempt.
//
// The fencing token is the row's version: it grows by one per acquisition.
// A new row starts at the database clock in microseconds since the epoch,
// so a deleted and recreated row never hands out a lower token. [Guard] and
// [GuardSQL] make a transaction's writes conditional on the lock.
//
// One statement renews every lock of a Locker that is due (UPDATE … FROM
// unnest(…)). Release, ForceUnlock and MinHold (a row kept until a point on
// the database clock, renewed by nobody) are conditional UPDATEs.
//
// Waiting: without Config.PollOnly a Locker keeps one connection that
// LISTENs on the table's channel; a release notifies it in the releasing
// statement. A notification only wakes a waiter, which then tries the row:
// a forged NOTIFY grants nothing. Under it, waiters always retry when the
// holder's lock_until passes. A LISTEN connection that does not hear its
// own test notification is given up with a warning, and waiters poll.
//
// Semaphores and read-write locks (locker.NewSemaphore, locker.NewRWMutex)
// keep one row per holder or waiter in a second table, the lock table's
// name plus "_shared" (its DDL: [SharedTableSQL]). The key's row in the
// lock table gives every permit and hold its token, its version, so that
// tokens increase across plain locks and shared holds. While shared holds
// hold a key, its row's owner_token is "(shared)", which no plain lock
// takes. An attempt on a free key is one statement that takes the key's
// row for the hold itself, as a plain lock does: the key's first holder
// lives in the key's row (owner_token "(first) " and its owner token, its
// mode, weight and limit in lock_data), and is released, kept and renewed
// there. On a key another lock or hold holds, an attempt is one READ
// COMMITTED transaction behind the key's row lock, its statements sent at
// once in one round trip (a pgx batch, on a *sql.DB through its pgx
// connection); it first moves a first holder into the second table, where
// the holder's next renewal, release or keep finds it. Lockers of the
// version before first holders see a first holder's row as a plain lock's:
// their shared attempts on that key fail with a conflict until it is
// released or moved.
// A waiter records its place in line: a waiting writer blocks later
// readers, a waiting heavy request later light ones. The holds are renewed
// in the statement that renews the Locker's locks. A release is one
// statement, which frees the key's row when no other hold or waiter is
// left. It leaves the row marked when another attempt has it locked, as
// it leaves the row of holders that crashed. A marked row with no live
// hold is free: every acquisition frees it first (a plain lock, a
// multi-key lock, a shared hold), and Inspect and List show the key free.
// The server runs an attempt's batch without waiting for the client, so
// a client cut off in the middle holds up no other attempt. It ends the
// other transactions on shared holds (Break, SetLimit, the cleanup of an
// attempt whose outcome is unknown) when they wait for their client for
// more than a third of the TTL (within 1 s and 10 s), so that a client
// cut off in the middle holds its key's other attempts up that long at
// most. Such a transaction, rolled back because its session ended before
// the commit was sent, runs once more on another connection.
//
// A semaphore's limit is on every row of its holders and waiters.
// locker.SetLimit changes it on all of them in one transaction behind the
// key's row lock, and notifies the key's waiters.
//
// # Limits
//
// Keys are text of at most [MaxKeyBytes] bytes, prefix included, without NUL
// bytes; other keys fail with locker.ErrInvalidKey. Keys are stored as they
// are, never hashed.
//
// Behind PgBouncer in transaction pooling mode LISTEN does not work: set
// Config.PollOnly (poll_only=true in a URL), and use pgx's simple protocol
// (default_query_exec_mode=simple_protocol) before PgBouncer 1.21.
//
// A Locker on a *pgxpool.Pool opens up to two connections of its own
// beside the pool's MaxConns: one for LISTEN (unless PollOnly) and one
// for its renewals; count them in the server's max_connections.
//
// Behind PgBouncer, keep server_login_retry well below TTL/3. After a
// database restart PgBouncer refuses logins for that long: renewals fail,
// and a longer refusal loses every lock.
//
// PgBouncer 1.18 (Debian 12's) can crash when many cancel requests reach
// it at once ("bad client state" in disconnect_client). pgx sends one
// whenever it closes a connection whose statement's ctx ended; the
// Locker's calls that a ctx or Close cuts short send them too. Use
// PgBouncer 1.19 or later in front of a lock store; the Locker itself
// never needs a cancel request to reach the server.
//
// Waiters for plain locks are not served in order: there is no queue. A
// release wakes every waiting Locker (with PollOnly, their next polls find
// the row free), and their statements race for the row. A Lock that
// arrives as the key is released, such as the releasing goroutine's next
// one, often wins. A waiter has no bound on how often it loses. Waiters
// for shared holds queue in the table of shared holds.
//
// A lock table whose name is longer than 56 bytes leaves no room for the
// "_shared" suffix: its Locker has no shared holds.
//
// A lock's data (locker.WithData) is in lock_data, which a table made by
// an earlier version lacks: New adds it ([AddDataColumnSQL]).
//
// Consensus is the database's: an asynchronous replica promoted after a
// failover may have lost recent acquisitions.
//
// # Errors
//
// Errors wrap the database's (*pgconn.PgError). Missing privileges, a
// missing table or database, failed authentication and a closed pool match
// driver.ErrPermanent: a waiting Lock returns them at once.
//
// Every acquiring statement carries a fence on the database clock, after
// which it takes nothing. A Lock or TryLock that gave up while its
// statement was on the way (held by a partition, queued in PgBouncer) may
// have taken the row for nobody. The row then stays claimed until the fence
// passed and the database answers the undo (or, if the Locker is closed
// first, until its lock_until). A database clock stepped back by more than
// the fence window in that time can let the statement land after its undo.
//
// # URLs
//
// [Open] serves postgres:// and postgresql:// URLs; see its doc for the
// parameters.
//
// # Schema
//
// New creates the table, and adds lock_data to a table made by an earlier
// version ([AddDataColumnSQL]), unless Config.SkipMigration is set
// ([CreateTableSQL]):
//
//	CREATE TABLE IF NOT EXISTS "distribute_task_lock" (
//	  task_name   text        PRIMARY KEY,
//	  task_status text        NOT NULL CHECK (task_status IN ('RUNNING', 'FINISH')),
//	  version     bigint      NOT NULL,
//	  owner_token text        NOT NULL,
//	  owner_label text        NOT NULL,
//	  lock_until  timestamptz NOT NULL,
//	  start_time  timestamptz,
//	  finish_time timestamptz,
//	  update_time timestamptz NOT NULL,
//	  lock_data   bytea
//	)
//
// Rows are never deleted by the Locker, except the rows of shared holds
// and waiters that ended, which the key's next shared attempt or release
// deletes. [Purge] deletes idle rows of the lock table, except those of
// keys that shared holds hold, and tokens stay increasing across it.
package postgres
