package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

const (
	// DefaultTable is the lock table's default name, the seed design's.
	DefaultTable = "distribute_task_lock"

	// MaxKeyBytes is the longest key accepted, in bytes, counting the
	// Locker's prefix (locker.WithPrefix). It keeps the primary key's index
	// entries and the release notifications within PostgreSQL's limits.
	// Longer keys fail with locker.ErrInvalidKey naming this limit.
	MaxKeyBytes = 2048

	// minPoolForListen is the smallest MaxOpenConns (when set) of a
	// *sql.DB with which the Locker keeps one of its connections for
	// LISTEN.
	minPoolForListen = 4
	// maxTableName is PostgreSQL's identifier limit (NAMEDATALEN - 1).
	maxTableName = 63
	// serializationRetries is how often an acquisition retries a statement
	// rolled back by a serialization failure or a deadlock before it
	// reports the key as held, and how often a release or a break runs in
	// all before it fails.
	serializationRetries = 3
	// backend names the backend in errors.
	backend = "postgres"
)

// Config is the backend-specific configuration of [NewWithConfig] and
// [NewDBWithConfig]. The zero value is the default.
type Config struct {
	// Table is the lock table's name in the current schema (default
	// [DefaultTable]): letters, digits and underscores, at most 63 bytes.
	// It also names the notification channel.
	Table string

	// SkipMigration makes New leave DDL alone: the table must then exist
	// with the columns of [CreateTableSQL]. New checks them either way.
	SkipMigration bool

	// PollOnly turns off the LISTEN connection: Lock then waits by
	// polling the table with the Locker's backoff. Set it behind PgBouncer
	// in transaction pooling mode, where LISTEN does not work.
	PollOnly bool
}

// New returns a Locker that keeps its locks in the table [DefaultTable] of
// pool's database, creating the table if needed. It is NewWithConfig with
// the zero Config.
func New(pool *pgxpool.Pool, opts ...locker.Option) (locker.Locker, error) {
	return NewWithConfig(pool, Config{}, opts...)
}

// NewWithConfig returns a Locker on the caller's own pgx pool. The Locker
// never closes pool. Without cfg.PollOnly it opens one connection of its
// own, with pool's connection settings, for LISTEN.
//
// The Locker renews its locks and shared holds on one more connection of
// its own, opened at the first renewal, so that renewals never wait behind
// the caller's queries for a pooled connection. Both connections are made
// as pool makes its own (its ConnConfig, BeforeConnect and AfterConnect),
// but do not count against its MaxConns. The renewal connection is
// replaced before a renewal once it is older than pool's MaxConnLifetime
// or idle for longer than its MaxConnIdleTime. A renewal that meets a
// broken connection (a server restart, pg_terminate_backend) runs again at
// once on a new one. Closing pool does not end the renewals: close the
// Locker.
//
// NewWithConfig creates the table (unless cfg.SkipMigration) and checks its
// columns, bounded by 30 seconds. It returns an error matching
// locker.ErrInvalidOption for a nil pool, a bad table name or option, and an
// error wrapping the database's otherwise.
func NewWithConfig(pool *pgxpool.Pool, cfg Config, opts ...locker.Option) (locker.Locker, error) {
	if pool == nil {
		return nil, &locker.Error{Op: "new", Backend: backend, Err: locker.ErrInvalidOption, Cause: errors.New("nil *pgxpool.Pool")}
	}
	return newLocker(newPoolQuerier(pool), cfg, poolKeptConn(pool), opts)
}

// NewDB is NewDBWithConfig with the zero Config.
func NewDB(db *sql.DB, opts ...locker.Option) (locker.Locker, error) {
	return NewDBWithConfig(db, Config{}, opts...)
}

// NewDBWithConfig is NewWithConfig on a *sql.DB opened with pgx's
// database/sql driver (github.com/jackc/pgx/v5/stdlib, which GORM's
// postgres driver uses: pass gormDB.DB()). Without cfg.PollOnly the Locker
// keeps one of db's connections for LISTEN, and it keeps one for the
// renewals of its locks and shared holds, taken by NewDBWithConfig; when
// db's MaxOpenConns is set below 4, it keeps neither: PollOnly is implied,
// and renewals use the pool. A renewal that meets a broken kept connection
// runs again at once on another of db's, which may have to wait for one
// when the caller's queries hold them all. database/sql does not tell
// its SetConnMaxLifetime or SetConnMaxIdleTime, so the kept connection
// is replaced only when a statement on it fails. When db has a
// MaxOpenConns, a statement that database/sql answers with
// driver.ErrBadConn (never sent) runs again, up to MaxOpenConns/3 more
// times: pgx closes a connection whose statement's ctx ended, and
// database/sql hands it to the next caller that waits for one. It returns
// an error matching locker.ErrInvalidOption for a db on another driver.
func NewDBWithConfig(db *sql.DB, cfg Config, opts ...locker.Option) (locker.Locker, error) {
	if err := checkStdlib(db); err != nil {
		return nil, &locker.Error{Op: "new", Backend: backend, Err: locker.ErrInvalidOption, Cause: err}
	}
	var kept *keptConn
	if m := db.Stats().MaxOpenConnections; m > 0 && m < minPoolForListen {
		cfg.PollOnly = true // no room for the LISTEN connection
	} else {
		kept = dbKeptConn(db)
	}
	return newLocker(newDBQuerier(db), cfg, kept, opts)
}

func newLocker(q querier, cfg Config, kept *keptConn, opts []locker.Option) (locker.Locker, error) {
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if err := validTable(cfg.Table); err != nil {
		return nil, &locker.Error{Op: "new", Backend: backend, Err: locker.ErrInvalidOption, Cause: err}
	}
	d := newDriver(q, cfg, kept)
	if cfg.PollOnly {
		return locker.New(d, opts...)
	}
	return locker.New(notifyingDriver{d}, opts...)
}

// newDriver returns the driver of a Locker on q with a valid cfg.Table.
func newDriver(q querier, cfg Config, kept *keptConn) *pgDriver {
	st := newStatements(cfg.Table)
	return &pgDriver{q: q, cfg: cfg, sql: st, shared: newSharedStatements(cfg.Table, st), first: newFirstStatements(cfg.Table),
		logger: slog.New(slog.DiscardHandler), renewConn: kept}
}

// validTable checks a table name: only [A-Za-z0-9_], at most 63 bytes.
func validTable(name string) error {
	if len(name) > maxTableName {
		return fmt.Errorf("Config.Table: %q is %d bytes; PostgreSQL allows at most %d", name, len(name), maxTableName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("Config.Table: %q may contain only letters, digits and underscores", name)
		}
	}
	return nil
}

// lockState is the driver's state of a held lock, handed back by
// locker.DriverState for [Guard].
type lockState struct {
	table   string
	key     string
	owner   string
	version int64
}

// pgDriver implements driver.Driver, driver.BatchRenewer,
// driver.Configurer, driver.Keeper, driver.Inspector, driver.Breaker,
// driver.Sharer and driver.Limiter.
type pgDriver struct {
	q      querier
	cfg    Config
	sql    statements
	shared sharedStatements
	first  firstStatements
	logger *slog.Logger
	label  string
	ttl    time.Duration // the Locker's TTL

	listen *listener // nil with PollOnly
	// renewConn is the connection kept for renewals; nil on a *sql.DB
	// whose MaxOpenConns leaves no room.
	renewConn *keptConn

	clock driver.StoreClock // for the fences of acquiring statements

	inLine sync.Map // lineKey of each request this Locker's last attempt recorded in line

	// txStall, when set (by tests), runs inside each transaction on
	// shared holds (inTx), once it began; its error fails the
	// transaction.
	txStall func(runner) error
}

// notifyingDriver adds driver.Notifier; without Config.PollOnly New hands
// this one to the engine.
type notifyingDriver struct{ *pgDriver }

// Subscribe implements driver.Notifier through the Locker's LISTEN
// connection.
func (d notifyingDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return d.listen.subscribe(ctx, key)
}

// Info implements driver.Driver. The driver promises PromptCancel: pgx
// ends a statement, a dial or a wait for a pooled connection as soon as
// its ctx ends (with its default context handling, which sets a deadline
// on the connection), and so does database/sql.
func (d *pgDriver) Info() driver.Info {
	return driver.Info{Name: backend, MaxKeyBytes: MaxKeyBytes, PerLockTTL: true, PromptCancel: true}
}

// Configure implements driver.Configurer: it creates and checks the table.
func (d *pgDriver) Configure(ctx context.Context, cfg driver.Config) error {
	if cfg.Logger != nil {
		d.logger = cfg.Logger
	}
	d.label = cleanLabel(cfg.Label)
	d.ttl = cfg.TTL
	if !d.cfg.SkipMigration {
		if err := migrate(ctx, d.q, d.cfg.Table, createTableSQL(d.cfg.Table)); err != nil {
			return classify(err)
		}
		if err := migrateShared(ctx, d.q, d.cfg.Table); err != nil {
			return classify(err)
		}
	}
	if err := checkTable(ctx, d.q, d.cfg.Table); err != nil {
		return classify(err)
	}
	if _, err := d.clock.Read(ctx, d.queryNow); err != nil {
		return classify(err)
	}
	if d.renewConn != nil {
		if err := d.renewConn.warm(ctx); err != nil {
			return classify(fmt.Errorf("renewal connection: %w", err))
		}
	}
	if !d.cfg.PollOnly {
		d.listen = newListener(d.q, d.cfg.Table, cfg.Backoff, d.logger)
	}
	return nil
}

// cleanLabel makes the owner label valid UTF-8 without NUL, which text
// refuses.
func cleanLabel(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "?")
}

// ttlMicros converts a TTL to whole microseconds, at least 1.
func ttlMicros(d time.Duration) int64 { return max(d.Microseconds(), 1) }

// classify marks the database errors no retry can cure: missing
// privileges, tables or databases, failed authentication, and a closed
// handle.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if s := err.Error(); strings.Contains(s, "closed pool") || strings.Contains(s, "sql: database is closed") {
		return driver.Permanent(err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "42501", pe.Code == "42P01", pe.Code == "3D000", strings.HasPrefix(pe.Code, "28"):
			return driver.Permanent(err)
		}
	}
	return err
}

// retryable reports whether err is a serialization failure (40001) or a
// deadlock (40P01): the statement was rolled back and may run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// deadConn reports whether err says that the server had ended the
// connection before the statement ran (an administrator's or a crash's
// shutdown, pg_terminate_backend) or that the statement was never sent:
// the pool's next connection may well work.
//
// It leaves out driver.ErrBadConn, which is what a *sql.DB returns for a
// statement never sent. database/sql answers it only after its own tries:
// two on pooled or new connections, the last on a new one (or, with the
// pool at its MaxOpenConns, on the next connection returned to it). So the
// next connection was already tried, and running the statement once more
// would repeat those three tries (TestReleaseUnsentOnSQLDBRunsOnce). On a
// pool at its MaxOpenConns, dbQuerier itself runs it again (dbQuerier.again):
// the tries may all have met connections that closed under their last
// user (TestTryAcquireBesideDeadPooledConns). A *sql.DB
// whose pooled connections the server ended reaches this check only with
// the server's 57P01, which database/sql does not retry; deadConn takes
// that (TestReleaseAfterPooledConnsTerminated).
func deadConn(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	return err != nil && pgconn.SafeToRetry(err)
}

// definite reports whether a failed statement certainly did not take
// effect: the server answered with an error (the statement's transaction
// was rolled back), or nothing was sent.
//
// pgx says nothing was sent with pgconn.SafeToRetry. On a *sql.DB,
// pgx/stdlib replaces such an error with driver.ErrBadConn, which
// database/sql returns once its tries on other connections failed alike.
func definite(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) || pgconn.SafeToRetry(err) || errors.Is(err, sqldriver.ErrBadConn)
}

// TryAcquire implements driver.Driver with one statement: an INSERT … ON
// CONFLICT DO UPDATE that takes the row when it is missing, free or
// expired, and otherwise reads the holder's remaining time. A statement
// rolled back by a serialization failure or a deadlock runs again, up to
// three times, then the key counts as held. A statement that arrived after
// its fence runs once more with a fence from the fresh clock reading. A
// key whose row is marked as held by shared holds costs one statement
// more, which takes the row when none is left (settleTake).
func (d *pgDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if strings.ContainsRune(req.Key, 0) {
		return driver.Grant{}, fmt.Errorf("%w: the key contains a NUL byte, which PostgreSQL text refuses", locker.ErrInvalidKey)
	}
	label := d.label
	if req.Label != "" && req.Label != label {
		label = cleanLabel(req.Label)
	}
	fenced, settled := false, false
	// settling runs settleTake instead of the acquire statement: the key's
	// row is marked as held by shared holds, which may all have left.
	settling := false
	for try := 0; ; try++ {
		// Each statement stores a token of its own, so that the undo of
		// one whose outcome is unknown never frees a later attempt's
		// grant (the engine keeps req.Owner across a Lock's attempts).
		owner := fmt.Sprintf("%s.%016x", req.Owner, rand.Uint64())
		// The row's lock_until counts from the statement, not from the
		// call: a Lock that waited must not lose the time it waited.
		sent := time.Now()
		f := d.clock.Fence(ctx, sent, req.TTL)
		var (
			taken, remaining sql.NullInt64
			now              int64
			shared           sql.NullBool
			marked           bool // settleTake found the row marked
		)
		args := []any{req.Key, owner, label, ttlMicros(req.TTL), f.Store, dataArg(req.Data)}
		var err error
		if settling {
			err = d.q.query(ctx, d.shared.settleTake, args, func(scan func(...any) error) error {
				return scan(&taken, &marked, &now)
			})
			// Still marked and not taken, before the fence: live shared
			// holds hold the key.
			shared.Bool = marked && !taken.Valid && now < f.Store
		} else {
			err = d.q.query(ctx, d.sql.acquire, args, func(scan func(...any) error) error {
				return scan(&taken, &remaining, &now, &shared)
			})
		}
		if err == nil && now > 0 {
			d.clock.Observe(now, sent, time.Since(sent))
		}
		wasSettling := settling
		if err == nil {
			settling = false
		}
		switch {
		case retryable(err) && try < serializationRetries:
			if !driver.Sleep(ctx, driver.Jitter(time.Duration(try+1)*time.Millisecond)) {
				return driver.Grant{}, ctx.Err()
			}
			continue
		case retryable(err):
			return driver.Grant{}, driver.Held(0)
		case err != nil:
			err = classify(fmt.Errorf("acquire: %w", err))
			if !definite(err) {
				return driver.Grant{}, d.residue(err, req.Key, owner, f)
			}
			return driver.Grant{}, err
		case taken.Valid:
			return driver.Grant{
				Token:    uint64(taken.Int64),
				Validity: req.TTL,
				Since:    sent,
				State:    &lockState{table: d.cfg.Table, key: req.Key, owner: owner, version: taken.Int64},
			}, nil
		case shared.Bool && !settled:
			// Shared holds hold the key, or held it until they all
			// left (their rows expired, or the last release found the
			// row locked): settleTake takes the row when none is left.
			settled, settling = true, true
			continue
		case shared.Bool:
			return driver.Grant{}, fmt.Errorf("%w: the key is held by shared holds (a semaphore or a read-write lock), not a plain lock", driver.ErrConflict)
		case remaining.Valid && remaining.Int64 > 0:
			return driver.Grant{}, driver.Held(time.Duration(remaining.Int64) * time.Microsecond)
		case now >= f.Store && !fenced:
			// Fenced out on arrival (a stale clock mapping, a database
			// clock that jumped, or a slow dial): the next fence comes
			// from this statement's reading. The statement took
			// nothing, so when ctx ended meanwhile that is the answer,
			// not a holder that does not exist.
			if err := ctx.Err(); err != nil {
				return driver.Grant{}, err
			}
			fenced, settling = true, wasSettling
			continue
		case now >= f.Store:
			// Fenced out again: the statement took nothing, and nobody
			// was seen holding the key. The database or the way to it
			// answers later than the fence window: an error, not a
			// holder that does not exist.
			if err := ctx.Err(); err != nil {
				return driver.Grant{}, err
			}
			return driver.Grant{}, lateError("acquire", req.TTL)
		case wasSettling && !marked:
			// The row changed since the acquire statement read it.
			continue
		default:
			// The holder committed after this statement's snapshot, or
			// freed the row meanwhile: held, for an unknown time.
			return driver.Grant{}, driver.Held(0)
		}
	}
}

// leaseState returns the lock state of a lease.
func leaseState(l driver.Lease) lockState {
	if s, ok := l.State.(*lockState); ok {
		return *s
	}
	return lockState{key: l.Key, owner: l.Owner, version: int64(l.Token)}
}

// freeing runs a statement that frees rows and notifies, and returns how
// many rows it freed. A statement rolled back by a serialization failure
// or a deadlock (sessions that default to SERIALIZABLE, beside another
// statement on the row) freed nothing: it runs again, up to
// serializationRetries times in all.
func (d *pgDriver) freeing(ctx context.Context, stmt string, args ...any) (int, error) {
	for try := 1; ; try++ {
		n := 0
		err := d.q.query(ctx, stmt, args, func(scan func(...any) error) error {
			n++
			return nil
		})
		if !retryable(err) || try == serializationRetries || ctx.Err() != nil {
			return n, err
		}
	}
}

// Release implements driver.Driver: FINISH where owner and version still
// match and the row is RUNNING, and a notification to the waiters in the
// same statement.
func (d *pgDriver) Release(ctx context.Context, l driver.Lease) error {
	if s, ok := l.State.(*shareState); ok {
		if s.inRow() {
			return d.releaseFirst(ctx, s)
		}
		return d.releaseShared(ctx, s)
	}
	s := leaseState(l)
	n, err := d.freeing(ctx, d.sql.release, s.key, s.owner, s.version, d.cfg.Table)
	if deadConn(err) && ctx.Err() == nil {
		// The pool handed out a connection the server had ended: the
		// statement never ran, so it is sent once more, on another one.
		n, err = d.freeing(ctx, d.sql.release, s.key, s.owner, s.version, d.cfg.Table)
	}
	if err != nil {
		return classify(fmt.Errorf("release: %w", err))
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// Break implements driver.Breaker (locker.ForceUnlock).
func (d *pgDriver) Break(ctx context.Context, key string) error {
	n, err := d.freeing(ctx, d.sql.force, key, d.cfg.Table)
	if err != nil {
		return classify(fmt.Errorf("break: %w", err))
	}
	if n == 0 {
		// Not a plain lock: the key's shared holds, if any.
		if err := d.breakShared(ctx, key); err != nil {
			return fmt.Errorf("break: %w", err)
		}
	}
	return nil
}

// Keep implements driver.Keeper (locker.MinHold): the run is over
// (finish_time set) but the row stays RUNNING until remaining from now on
// the database clock, renewed by nobody.
func (d *pgDriver) Keep(ctx context.Context, l driver.Lease, remaining time.Duration) error {
	if s, ok := l.State.(*shareState); ok {
		if s.inRow() {
			return d.keepFirst(ctx, s, remaining)
		}
		return d.keepShared(ctx, s, remaining)
	}
	s := leaseState(l)
	n, err := d.q.exec(ctx, d.sql.keep, ttlMicros(remaining), s.key, s.owner, s.version)
	if err != nil {
		return classify(fmt.Errorf("keep: %w", err))
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// Inspect implements driver.Inspector from the key's row.
func (d *pgDriver) Inspect(ctx context.Context, key string) (driver.Status, error) {
	var (
		st            driver.Status
		found, shared bool
	)
	err := d.q.query(ctx, d.sql.inspect, []any{key}, func(scan func(...any) error) error {
		var (
			status, label string
			version       int64
			start, until  sql.NullInt64
			alive, first  bool
			data          []byte
		)
		if err := scan(&status, &version, &label, &start, &until, &alive, &shared, &data, &first); err != nil {
			return err
		}
		found = status == "RUNNING" && alive
		if found && first {
			var err error
			st, err = firstStatus(label, version, start, until, data)
			return err
		}
		st = driver.Status{Held: found, Label: label, Token: uint64(version), Acquired: utc(start), Expires: utc(until), Data: dataOf(data)}
		return nil
	})
	if err != nil {
		return driver.Status{}, classify(fmt.Errorf("inspect: %w", err))
	}
	if shared {
		st, err := d.inspectShared(ctx, key)
		if err != nil {
			return driver.Status{}, fmt.Errorf("inspect: %w", err)
		}
		return st, nil
	}
	if !found {
		return driver.Status{}, nil
	}
	return st, nil
}

// utc converts microseconds since the epoch to a UTC time; NULL is zero.
func utc(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return time.UnixMicro(us.Int64).UTC()
}

// rowKey identifies one acquisition's row.
type rowKey struct {
	key, owner string
	version    int64
}

// RenewBatch implements driver.BatchRenewer: one UPDATE … FROM unnest(…)
// for every lease, whose RETURNING names the rows it renewed. Shared holds
// are renewed by a second UPDATE in the same statement; a first holder
// still in its key's row (first.go) by both.
func (d *pgDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	var keys, owners []string
	var versions, ttls []int64
	shared := false
	inRow := make([]bool, len(ls))
	for i, l := range ls {
		if s, ok := l.State.(*shareState); ok {
			shared = true
			if inRow[i] = s.inRow(); inRow[i] {
				keys, owners, versions, ttls = append(keys, s.key), append(owners, firstOwner(s.owner)), append(versions, s.token), append(ttls, ttlMicros(l.TTL))
			}
			continue
		}
		s := leaseState(l)
		keys, owners, versions, ttls = append(keys, s.key), append(owners, s.owner), append(versions, s.version), append(ttls, ttlMicros(l.TTL))
	}
	renewed := make(map[rowKey]bool, len(ls))
	var (
		renewedShared map[shareKey]bool
		err           error
	)
	if shared {
		renewedShared, err = d.renewMixed(ctx, [4]any{keys, owners, versions, ttls}, ls, inRow, renewed)
	} else {
		err = d.renewQuery(ctx, d.sql.renew, []any{keys, owners, versions, ttls}, func(scan func(...any) error) error {
			var r rowKey
			if err := scan(&r.key, &r.owner, &r.version); err != nil {
				return err
			}
			renewed[r] = true
			return nil
		})
	}
	if err != nil {
		return nil, nil, classify(fmt.Errorf("renew: %w", err))
	}
	validity := make([]time.Duration, len(ls))
	errs := make([]error, len(ls))
	for i, l := range ls {
		var ok bool
		if s, isShared := l.State.(*shareState); isShared {
			ok = renewedShared[s.name()]
			if ok && s.first {
				s.moved.Store(true)
			}
			ok = ok || inRow[i] && renewed[rowKey{s.key, firstOwner(s.owner), s.token}]
		} else {
			s := leaseState(l)
			ok = renewed[rowKey{s.key, s.owner, s.version}]
		}
		if ok {
			validity[i] = l.TTL
		} else {
			errs[i] = driver.ErrNotHeld
		}
	}
	return validity, errs, nil
}

// renewQuery runs a renewal statement on the connection kept for
// renewals, or on the pool when there is none.
func (d *pgDriver) renewQuery(ctx context.Context, sql string, args []any, row func(scan func(dest ...any) error) error) error {
	if d.renewConn == nil {
		return d.q.query(ctx, sql, args, row)
	}
	return d.renewConn.query(ctx, sql, args, row)
}

// Close implements driver.Driver: it stops the LISTEN connection and
// gives the renewals' connection back. The caller's pool stays open.
func (d *pgDriver) Close() error {
	if d.listen != nil {
		d.listen.close()
	}
	if d.renewConn != nil {
		d.renewConn.close()
	}
	return nil
}
