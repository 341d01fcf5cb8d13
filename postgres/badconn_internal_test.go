package postgres

import (
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/residuetest"
	"github.com/jackc/pgx/v5/stdlib"
)

// TestUnsentStatementLeavesNoResidue: on a *sql.DB, every statement's
// Parse fails before any byte of it is written (the test's connections
// refuse the write). pgx/stdlib turns pgx's safe-to-retry error into
// driver.ErrBadConn, and database/sql answers that once its tries on other
// connections failed the same way. The acquiring statement never reached
// the server: the attempt's error must carry no Residue, whose undo would
// be one needless UPDATE. A real server refuses nothing this way on
// demand, hence the wrapped connection.
func TestUnsentStatementLeavesNoResidue(t *testing.T) {
	var refuse atomic.Bool
	var refused atomic.Int32
	d, ctx := sqlDBDriver(t, func(c net.Conn) net.Conn {
		return &unsentConn{Conn: c, refuse: &refuse, refused: &refused}
	})
	req := driver.Request{Key: fmt.Sprintf("unsent/%x", rand.Uint64()), Owner: fmt.Sprintf("unsent.%x", rand.Uint64()), TTL: sharedTTL}

	residuetest.Unsent(ctx, t, d, req, &refuse, &refused)
}

// TestReleaseUnsentOnSQLDBRunsOnce: on a *sql.DB, a Release whose
// statement no connection could send fails with driver.ErrBadConn only
// after database/sql's own tries: two on pooled or new connections, the
// last on a new one. deadConn does not run such a Release once more: the
// next connection it would get is what database/sql already tried. The
// statement never ran, so the key is still held, and a Release once
// statements reach the server frees it.
func TestReleaseUnsentOnSQLDBRunsOnce(t *testing.T) {
	var refuse atomic.Bool
	var refused, dialled atomic.Int32
	d, ctx := sqlDBDriver(t, func(c net.Conn) net.Conn {
		dialled.Add(1)
		return &unsentConn{Conn: c, refuse: &refuse, refused: &refused}
	})
	req := driver.Request{Key: fmt.Sprintf("unsent-release/%x", rand.Uint64()), Owner: fmt.Sprintf("unsent.%x", rand.Uint64()), TTL: sharedTTL}
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	lease := driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: req.TTL, State: g.State}
	refused.Store(0)
	before := dialled.Load()
	refuse.Store(true)
	err = d.Release(ctx, lease)
	refuse.Store(false)
	if !errors.Is(err, sqldriver.ErrBadConn) {
		t.Fatalf("Release = %v; want database/sql's driver.ErrBadConn after its tries", err)
	}
	// database/sql's tries: maxBadConnRetries (2) on pooled or new
	// connections, then one on a new one.
	if n := refused.Load(); n != 3 {
		t.Errorf("%d statements refused; want 3, database/sql's tries of one run of Release", n)
	}
	t.Logf("one run of Release: %d statements refused, %d connections dialled", refused.Load(), dialled.Load()-before)
	if n := dialled.Load() - before; n < 1 {
		t.Errorf("%d connections dialled during the Release; want database/sql's last try on a new one", n)
	}
	if err := d.Release(ctx, lease); err != nil {
		t.Fatalf("Release once statements reach the server: %v; the unsent one left the key held", err)
	}
}

// TestReleaseAfterPooledConnsTerminated: on a *sql.DB whose pooled
// connections the server all ended (pg_terminate_backend) just after
// their last use, a Release succeeds. The first run meets a connection
// that pgx/stdlib's session reset does not yet know is dead: the server's
// 57P01 comes back, which database/sql does not retry, and deadConn runs
// the Release once more.
func TestReleaseAfterPooledConnsTerminated(t *testing.T) {
	d, ctx := sqlDBDriver(t, nil)
	db := d.q.(dbQuerier).db
	app := fmt.Sprintf("terminated_%x", rand.Uint64())
	req := driver.Request{Key: fmt.Sprintf("terminated/%x", rand.Uint64()), Owner: fmt.Sprintf("terminated.%x", rand.Uint64()), TTL: sharedTTL}
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// Two connections in the pool (database/sql keeps two idle), each
	// named for the termination below.
	var conns []*sql.Conn
	for range 2 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecContext(ctx, "SELECT set_config('application_name', $1, false)", app); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	admin, _ := sqlDBDriver(t, nil)
	if n, err := admin.q.exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app); err != nil || n != 2 {
		t.Fatalf("terminating the pooled connections: %d rows, %v; want 2", n, err)
	}
	for left := 2; left > 0; time.Sleep(10 * time.Millisecond) {
		err := admin.q.query(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", []any{app}, func(scan func(...any) error) error { return scan(&left) })
		if err != nil {
			t.Fatalf("waiting for the terminated connections to end: %v", err)
		}
	}
	if err := d.Release(ctx, driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: req.TTL, State: g.State}); err != nil {
		t.Fatalf("Release after the pooled connections were terminated: %v", err)
	}
}

// unsentConn is a connection to the server whose writes that begin with
// a Parse message fail, with nothing written, while refuse is set.
type unsentConn struct {
	net.Conn
	refuse  *atomic.Bool
	refused *atomic.Int32
}

// Write refuses a write that begins with a Parse message ('P'), while
// c.refuse is set.
func (c *unsentConn) Write(p []byte) (int, error) {
	if c.refuse.Load() && len(p) > 0 && p[0] == 'P' {
		c.refused.Add(1)
		return 0, errors.New("test: statement refused before any byte was written")
	}
	return c.Conn.Write(p)
}

// TestTryAcquireBesideDeadPooledConns: on a *sql.DB at its MaxOpenConns,
// connections that closed under their user come back to the pool, as pgx
// leaves one whose statement's ctx ended (the caller's own work, which it
// cancelled): pgx/stdlib has no driver.Validator, so database/sql hands
// each to a waiting request, whose session reset then fails with
// driver.ErrBadConn. Every try of database/sql's, the last included, waits
// for a returned connection while the pool is full, and may meet another
// such one. Here two TryAcquire calls wait while five dead connections
// come back one at a time, each while both calls wait, and no new
// connection opens meanwhile: one of them meets three in a row. A TryAcquire
// must still take its free key, never fail with "bad connection" while the
// server answers.
func TestTryAcquireBesideDeadPooledConns(t *testing.T) {
	const dead, waiters = 5, 2
	var gated atomic.Bool
	open := make(chan struct{})
	d, ctx := sqlDBDriver(t, func(c net.Conn) net.Conn {
		if gated.Load() {
			<-open // a new connection opens only once the dead ones are back
		}
		return c
	})
	db := d.q.(dbQuerier).db
	db.SetMaxOpenConns(dead)
	var held []*sql.Conn
	for range dead {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	gated.Store(true)
	reopen := sync.OnceFunc(func() { close(open) })
	defer reopen()
	w0 := db.Stats().WaitCount
	type result struct {
		req driver.Request
		g   driver.Grant
		err error
	}
	results := make(chan result, waiters)
	for range waiters {
		go func() {
			req := driver.Request{Key: fmt.Sprintf("deadpooled/%x", rand.Uint64()), Owner: fmt.Sprintf("deadpooled.%x", rand.Uint64()), TTL: sharedTTL}
			g, err := d.TryAcquire(ctx, req)
			results <- result{req, g, err}
		}()
	}
	var got []result
	// waiting reports whether every call that has not returned waits
	// for a connection: each returned connection it met made it wait
	// again or return.
	waiting := func(returned int) bool {
		for {
			select {
			case r := <-results:
				got = append(got, r)
				continue
			default:
			}
			return db.Stats().WaitCount-w0+int64(len(got)) >= int64(waiters+returned)
		}
	}
	for i, c := range held {
		for deadline := time.Now().Add(10 * time.Second); len(got) == 0 && !waiting(i); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the calls did not wait for connection %d: WaitCount %d, %d returned", i+1, db.Stats().WaitCount-w0, len(got))
			}
		}
		if len(got) > 0 {
			// A call returned: the other may open a connection of its
			// own now, and the rest are discarded, not handed back.
			_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
			_ = c.Close()
			continue
		}
		if err := c.Raw(func(dc any) error { return dc.(*stdlib.Conn).Conn().Close(ctx) }); err != nil {
			t.Fatal(err)
		}
		_ = c.Close() // back to the pool, closed
	}
	reopen()
	for len(got) < waiters {
		got = append(got, <-results)
	}
	for _, r := range got {
		if r.err != nil {
			t.Errorf("TryAcquire of a free key beside dead pooled connections = %v; want the key taken", r.err)
			continue
		}
		if err := d.Release(ctx, driver.Lease{Key: r.req.Key, Owner: r.req.Owner, Token: r.g.Token, TTL: r.req.TTL, State: r.g.State}); err != nil {
			t.Error(err)
		}
	}
}
