package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	gomysql "github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

const (
	// DefaultTable is the lock table's default name, the seed design's.
	DefaultTable = "distribute_task_lock"

	// MaxKeyBytes is the longest key accepted, in bytes, counting the
	// Locker's prefix (locker.WithPrefix): the width of the task_name
	// column. Longer keys fail with locker.ErrInvalidKey naming this limit;
	// hash long natural keys before locking them.
	MaxKeyBytes = 255

	// maxTableName is MySQL's identifier limit.
	maxTableName = 64
	// maxLabelChars is the width of owner_label; longer labels are cut.
	maxLabelChars = 255
	// maxOwnerBytes is the width of owner_token.
	maxOwnerBytes = 64
	// minPoolForWakeups is the smallest MaxOpenConns (when set) with which
	// the Locker uses connections for wake-ups.
	minPoolForWakeups = 4
	// renewChunk is the most leases renewed by one statement.
	renewChunk = 512
	// cleanupTimeout bounds the undo of an acquisition whose outcome is
	// unknown.
	cleanupTimeout = 2 * time.Second
	// backend names the backend in errors.
	backend = "mysql"
)

// Config is the backend-specific configuration of [NewWithConfig]. The zero
// value is the default.
type Config struct {
	// Table is the lock table's name in the database of db (default
	// [DefaultTable]): letters, digits and underscores, at most 64 bytes.
	Table string

	// SkipMigration makes New leave DDL alone, for teams that manage their
	// schema themselves: the table must then exist with the DDL in the
	// package doc. New checks its columns either way.
	SkipMigration bool

	// PollOnly turns off the wake-ups through named locks (GET_LOCK): Lock
	// then waits by polling the table with the Locker's backoff, and the
	// Locker uses no connection beyond its statements'. Set it behind a
	// proxy that multiplexes connections (ProxySQL, some poolers), where a
	// named lock does not stay with its session. It is implied when db's
	// MaxOpenConns is set below 4 at New.
	PollOnly bool
}

// New returns a Locker that keeps its locks in the table [DefaultTable] of
// db's database, creating the table if needed. It is NewWithConfig with the
// zero Config.
func New(db *gorm.DB, opts ...locker.Option) (locker.Locker, error) {
	return NewWithConfig(db, Config{}, opts...)
}

// NewWithConfig returns a Locker on the caller's own GORM handle, which must
// use the MySQL dialect (gorm.io/driver/mysql) on MySQL 5.7+ or MariaDB
// 10.0.2+. The Locker never changes db's settings nor closes it: it runs its own
// prepared statements on db's connection pool (db.DB()), outside GORM's
// callbacks and default transaction. The options are the shared locker
// options (locker.WithTTL, locker.WithPrefix, …).
//
// Lock statements always run on db's pool, never inside a transaction db may
// stand for: use [Guard] to tie a transaction to a lock.
//
// NewWithConfig creates the table (unless cfg.SkipMigration), checks its
// columns and prepares the statements, bounded by 30 seconds. It returns an
// error matching locker.ErrInvalidOption for a nil db, a db that is not on
// MySQL or has no *sql.DB (a custom ConnPool), a bad table name or option,
// and an error wrapping the database's otherwise.
func NewWithConfig(db *gorm.DB, cfg Config, opts ...locker.Option) (locker.Locker, error) {
	sqlDB, err := sqlHandle(db)
	if err != nil {
		return nil, &locker.Error{Op: "new", Backend: backend, Err: locker.ErrInvalidOption, Cause: err}
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if err := validTable(cfg.Table); err != nil {
		return nil, &locker.Error{Op: "new", Backend: backend, Err: locker.ErrInvalidOption, Cause: err}
	}
	if m := sqlDB.Stats().MaxOpenConnections; m > 0 && m < minPoolForWakeups {
		cfg.PollOnly = true // no room for the wake-up connections
	}
	d := newDriver(sqlDB, cfg, readTimeout(db))
	if cfg.PollOnly {
		return locker.New(d, opts...)
	}
	return locker.New(notifyingDriver{d}, opts...)
}

// sqlHandle returns the *sql.DB under a GORM handle on MySQL.
func sqlHandle(db *gorm.DB) (*sql.DB, error) {
	if db == nil {
		return nil, errors.New("nil *gorm.DB")
	}
	if db.Config == nil {
		return nil, errors.New("zero gorm.DB: open it with gorm.Open")
	}
	if db.Dialector == nil || db.Dialector.Name() != "mysql" {
		name := "none"
		if db.Dialector != nil {
			name = db.Dialector.Name()
		}
		return nil, fmt.Errorf("*gorm.DB uses the %s dialect; the mysql backend needs gorm.io/driver/mysql", name)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("*gorm.DB has no *sql.DB: %w", err)
	}
	return sqlDB, nil
}

// validTable checks a table name: it is spliced into SQL, so only
// [A-Za-z0-9_] is accepted.
func validTable(name string) error {
	if len(name) > maxTableName {
		return fmt.Errorf("Config.Table: %q is %d bytes; MySQL allows at most %d", name, len(name), maxTableName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("Config.Table: %q may contain only letters, digits and underscores", name)
		}
	}
	return nil
}

// readTimeout returns the readTimeout of db's DSN, when GORM knows it (0
// otherwise). Blocking named-lock waits must return well within it.
func readTimeout(db *gorm.DB) time.Duration {
	var c *gomysql.Config
	switch d := db.Dialector.(type) {
	case *gormmysql.Dialector:
		if d.Config != nil {
			c = d.Config.DSNConfig
		}
	case gormmysql.Dialector:
		if d.Config != nil {
			c = d.Config.DSNConfig
		}
	}
	if c == nil {
		return 0
	}
	return c.ReadTimeout
}

// lockState is the driver's state of a held lock, handed back by
// locker.DriverState for [Guard].
type lockState struct {
	table   string
	key     string // store key: task_name
	owner   string
	version uint64
	// name is the key's named lock, held on a session of its own until the
	// release, when the lock was taken through the line of waiters.
	name *heldName
}

// sqlDriver implements driver.Driver, driver.BatchRenewer and
// driver.Configurer on a *sql.DB.
type sqlDriver struct {
	db          *sql.DB
	cfg         Config
	sql         statements
	readTimeout time.Duration
	logger      *slog.Logger
	label       string
	backoff     driver.Backoff

	// prepared in Configure
	acquire, insert, remaining, release, undo, keep *sql.Stmt

	mu     sync.Mutex
	renew  map[int]*sql.Stmt // by padded batch size
	live   map[int]*sql.Stmt
	closed bool

	notify *notifier // nil with PollOnly
}

func newDriver(db *sql.DB, cfg Config, readTimeout time.Duration) *sqlDriver {
	return &sqlDriver{
		db:          db,
		cfg:         cfg,
		sql:         newStatements(cfg.Table),
		readTimeout: readTimeout,
		logger:      slog.New(slog.DiscardHandler),
		renew:       make(map[int]*sql.Stmt),
		live:        make(map[int]*sql.Stmt),
	}
}

// Info implements driver.Driver.
func (d *sqlDriver) Info() driver.Info {
	return driver.Info{Name: backend, MaxKeyBytes: MaxKeyBytes, PerLockTTL: true}
}

// Configure implements driver.Configurer: it creates and checks the table,
// prepares the statements and starts the wake-up notifier.
func (d *sqlDriver) Configure(ctx context.Context, cfg driver.Config) (err error) {
	if cfg.Logger != nil {
		d.logger = cfg.Logger
	}
	d.label = cleanLabel(cfg.Label)
	d.backoff = cfg.Backoff
	if !d.cfg.SkipMigration {
		if err := migrate(ctx, d.db, d.cfg.Table); err != nil {
			return err
		}
	}
	if err := checkTable(ctx, d.db, d.cfg.Table); err != nil {
		return err
	}
	srv, err := serverInfo(ctx, d.db)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			d.closeStatements()
		}
	}()
	for _, p := range []struct {
		stmt **sql.Stmt
		text string
	}{
		{&d.acquire, d.sql.acquire},
		{&d.insert, d.sql.insert},
		{&d.remaining, d.sql.remaining},
		{&d.release, d.sql.release},
		{&d.undo, d.sql.undo},
		{&d.keep, d.sql.keep},
	} {
		if *p.stmt, err = d.db.PrepareContext(ctx, p.text); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
	}
	if !d.cfg.PollOnly {
		d.notify = newNotifier(d.db, srv, d.cfg.Table, cfg.TTL, d.readTimeout, cfg.Backoff, d.logger)
		d.notify.releaseSQL = d.sql.releaseNamed
	}
	return nil
}

// cleanLabel makes the owner label fit owner_label: valid UTF-8, at most
// 255 characters.
func cleanLabel(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if utf8.RuneCountInString(s) <= maxLabelChars {
		return s
	}
	r := []rune(s)
	return string(r[:maxLabelChars])
}

// ttlMicros converts a TTL to whole microseconds, at least 1.
func ttlMicros(d time.Duration) int64 { return max(d.Microseconds(), 1) }

// TryAcquire implements driver.Driver. An existing row that is free or
// expired is taken by one conditional UPDATE (one round trip); a missing row
// is created already taken by INSERT IGNORE (two round trips). Only when both
// affect no row does a third statement read the holder's remaining time.
func (d *sqlDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.tryAcquire(ctx, req)
	if err == nil && d.notify != nil {
		// The holder goroutine takes the key's named lock, so that a
		// waiter in line is woken by the release.
		d.notify.acquired(req.Key, req.Owner)
	}
	return g, classify(err)
}

// classify marks the database errors no retry can cure: access denied to
// the database, the table or a command, and a table that does not exist.
func classify(err error) error {
	if err != nil && strings.Contains(err.Error(), "sql: database is closed") {
		return driver.Permanent(err) // database/sql does not export it
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1044, 1045, 1142, 1143, 1146, 1227, 1370:
			return driver.Permanent(err)
		}
	}
	return err
}

func (d *sqlDriver) tryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if len(req.Owner) > maxOwnerBytes {
		return driver.Grant{}, driver.Permanent(fmt.Errorf("owner token of %d bytes exceeds owner_token's %d", len(req.Owner), maxOwnerBytes))
	}
	ttl := ttlMicros(req.TTL)
	label := d.label
	if req.Label != "" && req.Label != label {
		label = cleanLabel(req.Label)
	}
	g, ok, err := d.exec(ctx, req, "acquire", d.acquire, req.Owner, label, ttl, req.Key)
	if ok || err != nil {
		return g, err
	}
	g, ok, err = d.exec(ctx, req, "insert", d.insert, req.Key, req.Owner, label, ttl)
	if ok || err != nil {
		return g, err
	}
	var rem sql.NullInt64
	if err := d.remaining.QueryRowContext(ctx, req.Key).Scan(&rem); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return driver.Grant{}, fmt.Errorf("read holder: %w", err)
	}
	if rem.Valid && rem.Int64 > 0 {
		return driver.Grant{}, driver.Held(time.Duration(rem.Int64) * time.Microsecond)
	}
	// Released (or expired) between our statements: one more try.
	g, ok, err = d.exec(ctx, req, "acquire", d.acquire, req.Owner, label, ttl, req.Key)
	if ok || err != nil {
		return g, err
	}
	return driver.Grant{}, driver.Held(0)
}

// exec runs an acquiring statement. It reports ok when it took the row, and
// an error only for a failure; a row it did not take is (zero, false, nil).
func (d *sqlDriver) exec(ctx context.Context, req driver.Request, what string, stmt *sql.Stmt, args ...any) (driver.Grant, bool, error) {
	// The row's lock_until counts from the statement, not from the call:
	// a Lock that waited in Acquire must not lose the time it waited.
	sent := time.Now()
	res, err := stmt.ExecContext(ctx, args...)
	if err != nil {
		if contended(err) {
			// Rolled back by a deadlock or a lock wait timeout on the
			// row: certainly not taken, and someone else is at it.
			return driver.Grant{}, false, driver.Held(0)
		}
		if !definite(err) {
			d.undoAcquire(ctx, req)
		}
		return driver.Grant{}, false, fmt.Errorf("%s: %w", what, err)
	}
	// LAST_INSERT_ID(expr) may have been evaluated even when no row was
	// taken (INSERT IGNORE on an existing row): rows affected decides.
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return driver.Grant{}, false, err
	}
	id, err := res.LastInsertId()
	if err != nil || id <= 0 {
		d.undoAcquire(ctx, req)
		return driver.Grant{}, false, fmt.Errorf("%s: no version returned (LAST_INSERT_ID %d): %v", what, id, err)
	}
	return driver.Grant{
		Token:    uint64(id),
		Validity: req.TTL,
		Since:    sent,
		State:    &lockState{table: d.cfg.Table, key: req.Key, owner: req.Owner, version: uint64(id)},
	}, true, nil
}

// contended reports whether err is a MySQL error saying the statement was
// rolled back because of contention on a row: a deadlock (1213) or a lock
// wait timeout (1205, for example behind a long Guard transaction).
func contended(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// definite reports whether a failed statement certainly did not run to
// completion: the server answered with an error (an autocommit statement
// that fails is rolled back), or the driver says nothing was sent.
func definite(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) || errors.Is(err, sql.ErrConnDone)
}

// undoAcquire gives up the row if req.Owner took it in a statement whose
// outcome is unknown, so that no phantom holder keeps the key until its TTL.
// It uses a fresh context: ctx may be why the statement failed.
func (d *sqlDriver) undoAcquire(ctx context.Context, req driver.Request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(req.TTL, cleanupTimeout))
	defer cancel()
	if _, err := d.undo.ExecContext(ctx, req.Key, req.Owner); err != nil {
		d.logger.Warn("locker: mysql: could not undo an acquisition with an unknown outcome; the key stays held until its TTL if it was taken",
			"key", req.Key, "err", err)
	}
}

// rowKey identifies one acquisition's row: key, owner and version.
type rowKey struct {
	key, owner string
	version    uint64
}

func leaseRow(l driver.Lease) rowKey {
	s := leaseState(l)
	return rowKey{key: s.key, owner: s.owner, version: s.version}
}

// leaseState returns the lock state of a lease.
func leaseState(l driver.Lease) lockState {
	if s, ok := l.State.(*lockState); ok {
		return *s
	}
	return lockState{key: l.Key, owner: l.Owner, version: l.Token}
}

// Release implements driver.Driver: FINISH and finish_time, only where owner
// and version still match and the row is RUNNING.
func (d *sqlDriver) Release(ctx context.Context, l driver.Lease) error {
	s := leaseState(l)
	// A lock from the line gives its named lock up in the release
	// statement itself, on its session.
	res, done, err := s.name.releaseRow(ctx, s)
	if !done {
		res, err = d.release.ExecContext(ctx, s.key, s.owner, s.version)
		// Whatever the outcome, this owner is done with the key (the
		// engine stops renewing it). The waiters are woken after the
		// statement returned, so after the row was freed.
		d.forget(s)
	}
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// forget gives up the key's named lock of a lock this driver is done
// with: its own session's, or the holder goroutine's.
func (d *sqlDriver) forget(s lockState) {
	switch {
	case s.name != nil:
		s.name.end()
	case d.notify != nil:
		d.notify.released(s.key, s.owner)
	}
}

// Break implements driver.Breaker (locker.ForceUnlock): FINISH and
// finish_time whoever holds the row. Waiters poll, or wake when their
// GET_LOCK times out (the holder keeps its named lock until it learns of
// the loss).
func (d *sqlDriver) Break(ctx context.Context, key string) error {
	res, err := d.db.ExecContext(ctx, d.sql.force, key)
	if err != nil {
		return fmt.Errorf("break: %w", classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("break: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("break: %w", driver.ErrNotHeld)
	}
	return nil
}

// Inspect implements driver.Inspector from the key's run record (see
// [Inspect]); Waiters is 0: the line of waiters is the server's queue of
// GET_LOCK calls, which it does not count.
func (d *sqlDriver) Inspect(ctx context.Context, key string) (driver.Status, error) {
	rows, err := d.db.QueryContext(ctx, d.sql.inspect, key)
	if err != nil {
		return driver.Status{}, fmt.Errorf("inspect: %w", err)
	}
	r, err := scanRecord(rows, key)
	switch {
	case errors.Is(err, ErrNoRecord):
		return driver.Status{}, nil
	case err != nil:
		return driver.Status{}, fmt.Errorf("inspect: %w", err)
	case !r.Held:
		return driver.Status{}, nil
	}
	return driver.Status{Held: true, Label: r.OwnerLabel, Token: r.Version, Acquired: r.StartTime, Expires: r.LockUntil}, nil
}

// Keep implements driver.Keeper (locker.MinHold): the run is over
// (finish_time set) but the row stays RUNNING until remaining from now on
// the database's clock, renewed by nobody; waiters poll until then.
func (d *sqlDriver) Keep(ctx context.Context, l driver.Lease, remaining time.Duration) error {
	s := leaseState(l)
	// Nobody runs the key any more: the waiters may line up for its
	// lock_until (they find the row held and poll until then).
	defer d.forget(s)
	res, err := d.keep.ExecContext(ctx, max(remaining.Microseconds(), 1), s.key, s.owner, s.version)
	if err != nil {
		return fmt.Errorf("keep: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("keep: %w", err)
	}
	if n == 0 {
		// Not ours any more, or a retry of a Keep that took effect (same
		// values: MySQL counts the row as not changed).
		return driver.ErrNotHeld
	}
	return nil
}

// RenewBatch implements driver.BatchRenewer: one UPDATE per chunk of up to
// 512 leases (two for 1,000 held locks), plus one SELECT for a chunk in which
// some lease did not match, to tell which.
func (d *sqlDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	validity := make([]time.Duration, len(ls))
	errs := make([]error, len(ls))
	// Leases of one Locker share its TTL; group anyway.
	byTTL := map[time.Duration][]int{}
	var ttls []time.Duration
	for i, l := range ls {
		if _, ok := byTTL[l.TTL]; !ok {
			ttls = append(ttls, l.TTL)
		}
		byTTL[l.TTL] = append(byTTL[l.TTL], i)
	}
	for _, ttl := range ttls {
		idx := byTTL[ttl]
		for len(idx) > 0 {
			n := min(len(idx), renewChunk)
			d.renewChunk(ctx, ls, idx[:n], ttl, validity, errs)
			idx = idx[n:]
		}
	}
	return validity, errs, nil
}

// renewChunk renews the leases ls[idx...] (at most renewChunk) with one
// UPDATE, padded to a power of two with repeats of the last lease so that a
// few prepared statements serve every batch size.
func (d *sqlDriver) renewChunk(ctx context.Context, ls []driver.Lease, idx []int, ttl time.Duration, validity []time.Duration, errs []error) {
	fail := func(err error) {
		for _, i := range idx {
			errs[i] = err
		}
	}
	size := padded(len(idx))
	states := make([]rowKey, size)
	distinct := map[rowKey]bool{}
	for j := range size {
		states[j] = leaseRow(ls[idx[min(j, len(idx)-1)]])
		distinct[states[j]] = true
	}
	args := make([]any, 0, 1+4*size)
	args = append(args, ttlMicros(ttl))
	for _, s := range states {
		args = append(args, s.key)
	}
	for _, s := range states {
		args = append(args, s.key, s.owner, s.version)
	}
	stmt, err := d.stmt(ctx, d.renew, size, d.sql.renewSQL)
	if err != nil {
		fail(fmt.Errorf("renew: %w", err))
		return
	}
	res, err := stmt.ExecContext(ctx, args...)
	if err != nil {
		fail(fmt.Errorf("renew: %w", err))
		return
	}
	n, err := res.RowsAffected()
	if err != nil {
		fail(fmt.Errorf("renew: %w", err))
		return
	}
	renewed := distinct
	if int(n) != len(distinct) {
		// Some lease did not match (or, without CLIENT_FOUND_ROWS, a row
		// was already at the same lock_until): ask which rows are held
		// by whom. A row this owner still holds now was renewed above.
		if renewed, err = d.liveRows(ctx, states); err != nil {
			fail(fmt.Errorf("renew: %w", err))
			return
		}
	}
	for _, i := range idx {
		s := leaseRow(ls[i])
		if renewed[s] {
			validity[i] = ttl
			if d.notify != nil {
				d.notify.renewed(s.key, s.owner)
			}
		} else {
			errs[i] = driver.ErrNotHeld
			d.forgetLater(leaseState(ls[i]))
		}
	}
}

// forgetLater is forget off the caller's goroutine (a renewal must not
// wait for a named-lock statement).
func (d *sqlDriver) forgetLater(s lockState) {
	if s.name == nil {
		d.forget(s)
		return
	}
	d.notify.wg.Add(1)
	go func() {
		defer d.notify.wg.Done()
		d.forget(s)
	}()
}

// liveRows returns which of the rows are held by their owner and version.
func (d *sqlDriver) liveRows(ctx context.Context, states []rowKey) (map[rowKey]bool, error) {
	stmt, err := d.stmt(ctx, d.live, len(states), d.sql.liveSQL)
	if err != nil {
		return nil, err
	}
	args := make([]any, len(states))
	for i, s := range states {
		args[i] = s.key
	}
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	live := map[rowKey]bool{}
	for rows.Next() {
		var key, owner []byte
		var version uint64
		if err := rows.Scan(&key, &owner, &version); err != nil {
			return nil, err
		}
		live[rowKey{key: string(key), owner: string(owner), version: version}] = true
	}
	return live, rows.Err()
}

// padded rounds n up to a power of two.
func padded(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// stmt returns the prepared statement of size n from cache, preparing it on
// first use.
func (d *sqlDriver) stmt(ctx context.Context, cache map[int]*sql.Stmt, n int, text func(int) string) (*sql.Stmt, error) {
	d.mu.Lock()
	s := cache[n]
	closed := d.closed
	d.mu.Unlock()
	if s != nil {
		return s, nil
	}
	if closed {
		return nil, errors.New("driver closed")
	}
	s, err := d.db.PrepareContext(ctx, text(n))
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		_ = s.Close()
		return nil, errors.New("driver closed")
	}
	if old := cache[n]; old != nil {
		_ = s.Close()
		return old, nil
	}
	cache[n] = s
	return s, nil
}

// notifyingDriver is the driver with the line of waiters and wake-ups
// through named locks; without Config.PollOnly, NewWithConfig hands this one
// to the engine, so that the engine finds driver.Acquirer only when it is
// on.
type notifyingDriver struct{ *sqlDriver }

// Close implements driver.Driver: it stops the notifier and closes the
// prepared statements. The caller's database handle stays open.
func (d *sqlDriver) Close() error {
	if d.notify != nil {
		d.notify.close()
	}
	d.closeStatements()
	return nil
}

func (d *sqlDriver) closeStatements() {
	d.mu.Lock()
	d.closed = true
	stmts := []*sql.Stmt{d.acquire, d.insert, d.remaining, d.release, d.undo, d.keep}
	for _, s := range d.renew {
		stmts = append(stmts, s)
	}
	for _, s := range d.live {
		stmts = append(stmts, s)
	}
	d.mu.Unlock()
	for _, s := range stmts {
		if s != nil {
			_ = s.Close()
		}
	}
}
