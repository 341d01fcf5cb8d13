package postgres

import (
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/residuetest"
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
