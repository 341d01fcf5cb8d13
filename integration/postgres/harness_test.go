package postgres_test

import (
	"context"
	"encoding/binary"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/golocker/locker"
	"github.com/golocker/locker/conformance"
	"github.com/golocker/locker/integration/internal/busywork"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// testTTL is the TTL of the conformance harness: renewals every 2/3 s, and
// room for the race detector on a busy machine (at 1.5 s, Scale and a pool
// recycled every 200 ms lost locks to starved renewals under load).
const testTTL = 2 * time.Second

// client says how a fleet's Lockers reach the database.
type client int

const (
	viaPool client = iota // *pgxpool.Pool
	viaDB                 // *sql.DB on pgx/stdlib
)

// fleet makes Lockers on one database for a harness: each Locker has its
// own pool, dialling through its own proxy, so that it can crash or be cut
// off alone.
type fleet struct {
	url    string // server (or pooler) URL
	client client
	direct bool // no proxies (benchmarks): Isolate is not available
	// dropCancels keeps the Lockers' pools from sending cancel requests
	// (see cancelDropper).
	dropCancels bool
	prefix      string
	ttl         time.Duration
	cfg         postgres.Config
	admin       *pgxpool.Pool

	// states, when set, tell the store's state for a failed case's log:
	// name → what it returns.
	states map[string]func(context.Context) (string, error)

	mu       sync.Mutex
	replicas map[locker.Locker]replica
	logged   map[testing.TB]*sync.Once // logs the states of a failed test
}

type replica struct {
	close func()
	proxy *testenv.Proxy
	work  callerPool
}

// callerPool is the pool the caller gave a Locker, as the caller's own
// work uses it (Harness.Busy).
type callerPool struct {
	size  int                                    // its most connections
	taken func() int                             // its connections in use now, the Locker's included
	sleep func(ctx context.Context, _ int) error // one slow statement, until ctx ends
}

// busyConns is the MaxOpenConns of the *sql.DB harness's handles: a pool
// the caller's work can fill (Harness.Busy), as large as pgxpool's
// default on up to four cores.
const busyConns = 4

func newFleet(t testing.TB, url string, c client, cfg postgres.Config) *fleet {
	t.Helper()
	return &fleet{
		url:      url,
		client:   c,
		prefix:   "conf/",
		ttl:      testTTL,
		cfg:      cfg,
		admin:    openPool(t, url),
		replicas: map[locker.Locker]replica{},
		logged:   map[testing.TB]*sync.Once{},
	}
}

// logOnFailure makes t log the fleet's states if it ends failed, once per
// test, from the first of its cleanups to run among those registered by
// the calls for t: the hooks call it, so that it logs before the cleanups
// registered earlier close the case's Lockers and pools.
func (f *fleet) logOnFailure(t testing.TB) {
	if len(f.states) == 0 {
		return
	}
	f.mu.Lock()
	once := f.logged[t]
	if once == nil {
		once = new(sync.Once)
		f.logged[t] = once
	}
	f.mu.Unlock()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, name := range slices.Sorted(maps.Keys(f.states)) {
				s, err := f.states[name](ctx)
				if err != nil {
					t.Logf("%s after the failure: %v", name, err)
					continue
				}
				t.Logf("%s after the failure:\n%s", name, s)
			}
		})
	})
}

// openPool opens a pgx pool on url, closed when the test ends.
func openPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	return openPoolVia(t, url, false)
}

// openPoolVia is openPool whose connections send no cancel request when
// dropCancels is set (see cancelDropper).
func openPoolVia(t testing.TB, url string, dropCancels bool) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse URL: %v", err)
	}
	pc.ConnConfig.ConnectTimeout = 5 * time.Second
	if dropCancels {
		dial := pc.ConnConfig.DialFunc
		pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &cancelDropper{Conn: c}, nil
		}
	}
	p, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// cancelDropper is a connection whose first write, when it is a
// PostgreSQL CancelRequest, is not sent: the connection closes instead.
// pgx sends one whenever it closes a connection whose statement's ctx
// ended, and PgBouncer 1.18 (Debian 12's) crashes under a stream of them
// ("bad client state" in disconnect_client), which ended the PgBouncer
// harness's pooler mid-suite. The Locker never relies on a cancel
// request: a statement whose ctx ends is fenced and undone
// (docs/design.md, "SQL backends: a fence on the database clock"). The
// server ends what a dropped request would have cancelled once it finds
// its client gone (client_connection_check_interval).
type cancelDropper struct {
	net.Conn
	wrote atomic.Bool
}

func (c *cancelDropper) Write(b []byte) (int, error) {
	if !c.wrote.Swap(true) && len(b) >= 8 && binary.BigEndian.Uint32(b) == uint32(len(b)) && binary.BigEndian.Uint32(b[4:]) == cancelRequestCode {
		_ = c.Conn.Close()
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// cancelRequestCode opens a PostgreSQL CancelRequest message.
const cancelRequestCode = 80877102

// open makes a Locker on url with the fleet's client kind; close closes
// its handle, and work is the handle as its caller uses it.
func (f *fleet) open(t testing.TB, url string, opts ...locker.Option) (l locker.Locker, close func(), work callerPool, err error) {
	t.Helper()
	opts = append([]locker.Option{locker.WithTTL(f.ttl), locker.WithPrefix(f.prefix)}, opts...)
	switch f.client {
	case viaDB:
		pc, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatalf("parse URL: %v", err)
		}
		pc.ConnConfig.ConnectTimeout = 5 * time.Second
		db := stdlib.OpenDB(*pc.ConnConfig)
		t.Cleanup(func() { _ = db.Close() })
		db.SetMaxOpenConns(busyConns)
		l, err := postgres.NewDBWithConfig(db, f.cfg, opts...)
		return l, func() { _ = db.Close() }, callerPool{
			size:  busyConns,
			taken: func() int { return db.Stats().InUse },
			sleep: func(ctx context.Context, _ int) error { _, err := db.ExecContext(ctx, slowStatement); return err },
		}, err
	default:
		p := openPoolVia(t, url, f.dropCancels)
		l, err := postgres.NewWithConfig(p, f.cfg, opts...)
		return l, p.Close, callerPool{
			size:  int(p.Config().MaxConns),
			taken: func() int { return int(p.Stat().AcquiredConns()) },
			sleep: func(ctx context.Context, _ int) error { _, err := p.Exec(ctx, slowStatement); return err },
		}, err
	}
}

// slowStatement is the caller's slow work: it runs until its ctx ends.
const slowStatement = "SELECT pg_sleep(3600)"

// busy is Harness.Busy: a slow statement on every connection of the
// Locker's pool, until the returned function ends them.
func (f *fleet) busy(t testing.TB, l locker.Locker) func() {
	f.logOnFailure(t)
	r, ok := f.get(t, l)
	if !ok {
		return func() {}
	}
	return busywork.Start(t, r.work.size, r.work.taken, r.work.sleep)
}

// newLocker is Harness.NewLocker.
func (f *fleet) newLocker(t testing.TB) locker.Locker {
	t.Helper()
	var p *testenv.Proxy
	url := f.url
	if !f.direct {
		p = testenv.NewProxy(t, hostOf(t, f.url))
		var err error
		if url, err = testenv.WithHost(f.url, p.Addr()); err != nil {
			t.Fatalf("proxy URL: %v", err)
		}
	}
	l, closeDB, work, err := f.open(t, url)
	if err != nil {
		t.Errorf("postgres.New: %v", err)
		return nil
	}
	f.mu.Lock()
	f.replicas[l] = replica{close: closeDB, proxy: p, work: work}
	f.mu.Unlock()
	f.logOnFailure(t)
	return l
}

func hostOf(t testing.TB, url string) string {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse URL: %v", err)
	}
	return net.JoinHostPort(pc.ConnConfig.Host, strconv.Itoa(int(pc.ConnConfig.Port)))
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

func (f *fleet) harness() conformance.Harness {
	return conformance.Harness{
		NewLocker: f.newLocker,
		NewLockerWith: func(t testing.TB, opts ...locker.Option) (locker.Locker, error) {
			l, _, _, err := f.open(t, f.url, opts...)
			return l, err
		},
		TTL: f.ttl,
		// A crashed process: its kernel resets its connections, so the
		// server ends its sessions and their transactions at once, and
		// nothing is released. A silent cut would leave the pool's Close
		// waiting for a statement in flight until the call's ctx ended.
		Crash: func(t testing.TB, l locker.Locker) {
			f.logOnFailure(t)
			if r, ok := f.get(t, l); ok {
				if r.proxy != nil {
					r.proxy.Reset()
				}
				r.close()
			}
		},
		Isolate: func(t testing.TB, l locker.Locker) func() {
			f.logOnFailure(t)
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
			if _, err := f.admin.Exec(ctx, `DELETE FROM "`+f.table()+`" WHERE task_name = $1`, f.prefix+key); err != nil {
				t.Errorf("delete behind: %v", err)
			}
		},
		Busy:        f.busy,
		MaxKeyBytes: postgres.MaxKeyBytes - len(f.prefix),
		MultiAtomic: true, // one statement
	}
}

func (f *fleet) table() string {
	if f.cfg.Table != "" {
		return f.cfg.Table
	}
	return postgres.DefaultTable
}

// TestConformance runs the suite on a pgx pool, on a server of its own,
// which its Restart hook restarts.
func TestConformance(t *testing.T) {
	t.Parallel() // a server of its own: see TestMain
	srv := testenv.NewPostgres(t)
	f := newFleet(t, srv.URL(), viaPool, postgres.Config{})
	f.states = map[string]func(context.Context) (string, error){"pg_stat_activity": srv.Activity}
	h := f.harness()
	h.Restart = srv.Restart
	conformance.Run(t, h)
}

// TestConformanceSQLDB runs the suite on *sql.DB through pgx/stdlib.
func TestConformanceSQLDB(t *testing.T) {
	t.Parallel() // a server of its own: see TestMain
	srv := testenv.NewPostgres(t)
	f := newFleet(t, srv.URL(), viaDB, postgres.Config{Table: "sqldb_locks"})
	f.states = map[string]func(context.Context) (string, error){"pg_stat_activity": srv.Activity}
	h := f.harness()
	h.Restart = srv.Restart
	conformance.Run(t, h)
}

// TestConformancePgBouncer runs the suite through PgBouncer in transaction
// pooling mode, polling.
func TestConformancePgBouncer(t *testing.T) {
	t.Parallel() // a server of its own: see TestMain
	srv := testenv.NewPostgres(t)
	b := testenv.NewPgBouncer(t, srv)
	f := newFleet(t, b.URL(), viaPool, postgres.Config{Table: "bouncer_locks", PollOnly: true})
	f.dropCancels = true
	f.states = map[string]func(context.Context) (string, error){"pg_stat_activity": srv.Activity, "PgBouncer SHOW POOLS": b.Pools, "PgBouncer's process": b.Log}
	h := f.harness()
	h.Restart = srv.Restart
	conformance.Run(t, h)
}
