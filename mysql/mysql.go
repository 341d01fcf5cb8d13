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
	// backend names the backend in errors.
	backend = "mysql"
)

// Config is the MySQL-specific configuration of a Locker. The zero Config is
// the default: [New] is Config{}.New.
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
// db's database, creating the table if needed. It is Config{}.New.
func New(db *gorm.DB, opts ...locker.Option) (locker.Locker, error) {
	return Config{}.New(db, opts...)
}

// New returns a Locker on the caller's own GORM handle, which must
// use the MySQL dialect (gorm.io/driver/mysql) on MySQL 5.7+ or MariaDB
// 10.0.2+. The Locker never changes db's settings nor closes it: it runs its own
// prepared statements on db's connection pool (db.DB()), outside GORM's
// callbacks and default transaction. The options are the shared locker
// options (locker.WithTTL, locker.WithPrefix, …).
//
// Lock statements always run on db's pool, never inside a transaction db may
// stand for: use [Guard] to tie a transaction to a lock.
//
// New creates the table (unless c.SkipMigration), checks its
// columns and prepares the statements, bounded by 30 seconds. It returns an
// error matching locker.ErrInvalidOption for a nil db, a db that is not on
// MySQL or has no *sql.DB (a custom ConnPool), a bad table name or option,
// and an error wrapping the database's otherwise.
func (c Config) New(db *gorm.DB, opts ...locker.Option) (locker.Locker, error) {
	cfg := c
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
	ttl         time.Duration // the Locker's TTL

	// prepared in Configure
	acquire, insert, remaining, release, undo, keep *sql.Stmt
	// acquireIdle is acquire of a row free for a while (statements.acquireIdle).
	acquireIdle *sql.Stmt

	// restores counts the connections of transactions on shared holds
	// whose session variables are being given back (inTx); Close waits
	// for them.
	restores sync.WaitGroup

	// renewer runs the renewals, on a connection of its own (renewConn).
	renewer *renewConn

	// execErr, when set (by tests), answers an acquiring statement named
	// what in its place, unless it returns nil.
	execErr func(what string) error
	// txStall, when set (by tests), runs inside each transaction on
	// shared holds (inTx), once it began; its error fails the
	// transaction.
	txStall func(*sql.Tx) error

	mu     sync.Mutex
	multi  map[int]*sql.Stmt    // by number of keys
	shared map[string]*sql.Stmt // by text: the statements on shared holds
	closed bool

	// ReleaseMulti's statement and its check, by padded number of keys
	releaseN, released map[int]*sql.Stmt

	notify *notifier // nil with PollOnly

	// isolationVar names the server's session variable of the isolation
	// level, which inTx sets (set in Configure; empty: a statement of its
	// own).
	isolationVar string
	mariaDB      bool // set in Configure: SET STATEMENT is available

	clock driver.StoreClock // for the fences of acquiring statements
}

func newDriver(db *sql.DB, cfg Config, readTimeout time.Duration) *sqlDriver {
	return &sqlDriver{
		db:          db,
		cfg:         cfg,
		sql:         newStatements(cfg.Table),
		readTimeout: readTimeout,
		logger:      slog.New(slog.DiscardHandler),
		renewer:     newRenewConn(db),
		multi:       make(map[int]*sql.Stmt),
		releaseN:    make(map[int]*sql.Stmt),
		released:    make(map[int]*sql.Stmt),
		shared:      make(map[string]*sql.Stmt),
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
	d.ttl = cfg.TTL
	if !d.cfg.SkipMigration {
		if err := migrate(ctx, d.db, d.cfg.Table); err != nil {
			return err
		}
		if err := migrateShared(ctx, d.db, d.cfg.Table); err != nil {
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
	d.setServer(srv)
	if _, err := d.clock.Read(ctx, d.queryNow); err != nil {
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
		{&d.acquireIdle, d.sql.acquireIdle},
	} {
		if *p.stmt, err = d.db.PrepareContext(ctx, p.text); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
	}
	// Taken at the first renewal, the connection could wait behind the
	// caller's queries for a free one.
	if err := d.renewer.open(ctx); err != nil {
		return fmt.Errorf("renewal connection: %w", err)
	}
	if !d.cfg.PollOnly {
		d.notify = newNotifier(d.db, srv, d.cfg.Table, cfg.TTL, d.readTimeout, cfg.Backoff, d.logger)
		d.notify.releaseSQL = d.sql.releaseNamed
		d.notify.heads = d.lineHeads
	}
	return nil
}

// setServer records what the driver needs to know about the server.
func (d *sqlDriver) setServer(srv server) {
	d.isolationVar, d.mariaDB = "transaction_isolation", srv.mariaDB
	if srv.mariaDB {
		d.isolationVar = "tx_isolation" // transaction_isolation from 11.1 only
	}
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

// notifyingDriver is the driver with the line of waiters and wake-ups
// through named locks; without Config.PollOnly, Config.New hands this one
// to the engine, so that the engine finds driver.Acquirer only when it is
// on.
type notifyingDriver struct{ *sqlDriver }

// Close implements driver.Driver: it stops the notifier, closes the
// prepared statements and gives the renewal connection back to the pool.
// The caller's database handle stays open.
func (d *sqlDriver) Close() error {
	if d.notify != nil {
		d.notify.close()
	}
	d.restores.Wait()
	d.closeStatements()
	return nil
}

func (d *sqlDriver) closeStatements() {
	d.mu.Lock()
	d.closed = true
	stmts := []*sql.Stmt{d.acquire, d.insert, d.remaining, d.release, d.undo, d.keep, d.acquireIdle}
	for _, m := range []map[int]*sql.Stmt{d.multi, d.releaseN, d.released} {
		for _, s := range m {
			stmts = append(stmts, s)
		}
	}
	for _, s := range d.shared {
		stmts = append(stmts, s)
	}
	d.mu.Unlock()
	for _, s := range stmts {
		if s != nil {
			_ = s.Close()
		}
	}
	d.renewer.close()
}
