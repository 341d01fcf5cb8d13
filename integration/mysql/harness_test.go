package mysql_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/golocker/locker"
	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/integration/internal/busywork"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
)

// testTTL is the TTL of the conformance harness: renewals every 0.8 s, and
// room for the race detector on a busy machine. At 1.5 s, holders lost
// locks to renewals stalled past their deadline while make test ran four
// packages at once (MultiNoDeadlock, SharedLateDelivery).
const testTTL = 2500 * time.Millisecond

// ioTimeout is the DSN's timeout, readTimeout and writeTimeout through a
// proxy: a connection the proxy cuts errors instead of hanging forever.
const ioTimeout = 2 * time.Second

// directIOTimeout is the same for a connection without a proxy, which
// nothing cuts: long enough for DDL on a loaded server in a container
// (mysql.New's migration ran out of 2 s in a docker suite run).
const directIOTimeout = 10 * time.Second

// dsnConfig parses dsn and sets the test timeouts; addr, when not empty,
// replaces the server address (a proxy's), and the timeouts are shorter.
func dsnConfig(t testing.TB, dsn, addr string) *gomysql.Config {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	timeout := directIOTimeout
	if addr != "" {
		cfg.Addr, timeout = addr, ioTimeout
	}
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = timeout, timeout, timeout
	return cfg
}

// openGorm opens a GORM handle on cfg, closed when the test ends.
func openGorm(t testing.TB, cfg *gomysql.Config) (*gorm.DB, *sql.DB) {
	t.Helper()
	gdb, err := gorm.Open(gormmysql.New(gormmysql.Config{DSNConfig: cfg}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("gorm.Open: %v", err)
	}
	sqlDB, err := gdb.DB()
	if err != nil {
		t.Fatalf("gorm DB: %v", err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	return gdb, sqlDB
}

// fleet makes Lockers on one database for a harness: each Locker has its own
// GORM handle and pool, dialling through its own proxy, so that it can crash
// or be cut off alone.
type fleet struct {
	dsn    string
	addr   string
	direct bool // no proxies (benchmarks): Isolate is not available
	prefix string
	ttl    time.Duration
	cfg    mysql.Config
	admin  *sql.DB

	mu       sync.Mutex
	replicas map[locker.Locker]replica
}

type replica struct {
	db    *sql.DB
	proxy *testenv.Proxy
}

func newFleet(t testing.TB, dsn string, cfg mysql.Config) *fleet {
	dc := dsnConfig(t, dsn, "")
	_, admin := openGorm(t, dc)
	return &fleet{
		dsn:      dsn,
		addr:     dc.Addr,
		prefix:   "conf/",
		ttl:      testTTL,
		cfg:      cfg,
		admin:    admin,
		replicas: map[locker.Locker]replica{},
	}
}

// newLocker is Harness.NewLocker.
func (f *fleet) newLocker(t testing.TB) locker.Locker {
	t.Helper()
	var p *testenv.Proxy
	addr := ""
	if !f.direct {
		p = testenv.NewProxy(t, f.addr)
		addr = p.Addr()
	}
	gdb, sqlDB := openGorm(t, dsnConfig(t, f.dsn, addr))
	sqlDB.SetMaxOpenConns(busyConns)
	l, err := f.cfg.New(gdb, locker.WithTTL(f.ttl), locker.WithPrefix(f.prefix))
	if err != nil {
		t.Errorf("mysql.New: %v", err)
		return nil
	}
	f.mu.Lock()
	f.replicas[l] = replica{db: sqlDB, proxy: p}
	f.mu.Unlock()
	return l
}

func (f *fleet) get(t testing.TB, l locker.Locker) (replica, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.replicas[l]
	if !ok {
		t.Errorf("the Locker was not made by this harness")
	}
	return r, ok
}

// newLockerWith is the harness's NewLockerWith.
func (f *fleet) newLockerWith(t testing.TB, opts ...locker.Option) (locker.Locker, error) {
	gdb, _ := openGorm(t, dsnConfig(t, f.dsn, ""))
	return f.cfg.New(gdb, append([]locker.Option{locker.WithTTL(f.ttl), locker.WithPrefix(f.prefix)}, opts...)...)
}

func (f *fleet) harness() conformance.Harness {
	return conformance.Harness{
		NewLocker:     f.newLocker,
		NewLockerWith: f.newLockerWith,
		TTL:           f.ttl,
		// A crashed process: its pool closes, nothing is released.
		Crash: func(t testing.TB, l locker.Locker) {
			if r, ok := f.get(t, l); ok {
				_ = r.db.Close()
			}
		},
		Isolate: func(t testing.TB, l locker.Locker) func() {
			r, ok := f.get(t, l)
			if !ok || r.proxy == nil {
				t.Errorf("Isolate needs a proxied Locker")
				return func() {}
			}
			r.proxy.Cut()
			return r.proxy.Heal
		},
		DeleteBehind: func(t testing.TB, key string) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := f.admin.ExecContext(ctx, "DELETE FROM `"+f.table()+"` WHERE task_name = ?", f.prefix+key); err != nil {
				t.Errorf("delete behind: %v", err)
			}
		},
		Busy:        f.busy,
		MaxKeyBytes: mysql.MaxKeyBytes - len(f.prefix),
		MultiAtomic: true, // one statement, or one transaction
	}
}

// busyConns is the MaxOpenConns of the harness's pools: a pool the
// caller's work can fill (Harness.Busy), with room for the Locker's
// wake-up connections.
const busyConns = 8

// slowStatement is the caller's slow work, statement after statement on
// a connection it keeps (a transaction, a batch): each ends well within
// the DSN's readTimeout, which would cut a longer one.
const slowStatement = "SELECT SLEEP(0.5)"

// busy is Harness.Busy: slow statements on every connection of the
// Locker's pool, until the returned function ends them.
func (f *fleet) busy(t testing.TB, l locker.Locker) func() {
	r, ok := f.get(t, l)
	if !ok {
		return func() {}
	}
	return busywork.Start(t, busyConns, func() int { return r.db.Stats().InUse }, func(ctx context.Context, _ int) error {
		c, err := r.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		for {
			if _, err := c.ExecContext(ctx, slowStatement); err != nil {
				return err
			}
		}
	})
}

func (f *fleet) table() string {
	if f.cfg.Table != "" {
		return f.cfg.Table
	}
	return mysql.DefaultTable
}

// TestConformance runs the suite on a server of its own, which its Restart
// hook restarts.
func TestConformance(t *testing.T) {
	srv := testenv.NewMySQL(t)
	h := newFleet(t, srv.DSN(), mysql.Config{}).harness()
	h.Restart = srv.Restart
	conformance.Run(t, h)
}

// TestConformancePollOnly runs the suite without wake-ups, on a server of
// its own, which its Restart hook restarts: the polling floor must be just
// as correct. Its sessions run at READ COMMITTED, as many deployments set
// them, where plain statements read without locks: a first holder's take
// then races other takes for real (FirstHolder).
func TestConformancePollOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	srv := testenv.NewMySQL(t)
	h := newFleet(t, readCommitted(t, srv.DSN()), mysql.Config{PollOnly: true, Table: "poll_locks"}).harness()
	h.Restart = srv.Restart
	conformance.Run(t, h)
}

// readCommitted returns dsn with its sessions at READ COMMITTED: the
// variable is transaction_isolation, or tx_isolation on a server without
// it (MariaDB before 11.1).
func readCommitted(t testing.TB, dsn string) string {
	t.Helper()
	_, db := openGorm(t, dsnConfig(t, dsn, ""))
	v := "transaction_isolation"
	var level string
	if err := db.QueryRowContext(t.Context(), "SELECT @@session.transaction_isolation").Scan(&level); err != nil {
		v = "tx_isolation"
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params[v] = "'READ-COMMITTED'"
	return cfg.FormatDSN()
}
