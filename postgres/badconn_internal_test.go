package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/residuetest"
	"github.com/golocker/locker/internal/storeenv"
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
	srv := storeenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	cc, err := pgx.ParseConfig(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	var refuse atomic.Bool
	var refused atomic.Int32
	dial := cc.DialFunc
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &unsentConn{Conn: c, refuse: &refuse, refused: &refused}, nil
	}
	db := stdlib.OpenDB(*cc)
	t.Cleanup(func() { _ = db.Close() })
	d := testDriver(ctx, t, newDBQuerier(db))
	req := driver.Request{Key: fmt.Sprintf("unsent/%x", rand.Uint64()), Owner: fmt.Sprintf("unsent.%x", rand.Uint64()), TTL: sharedTTL}

	residuetest.Unsent(ctx, t, d, req, &refuse, &refused)
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
