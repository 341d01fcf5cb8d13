package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/residuetest"
	"github.com/golocker/locker/internal/storeenv"
)

// TestUnsentStatementLeavesNoResidue: every execution of a prepared
// statement fails before any byte of it is written (the test's connections
// refuse the write), so go-sql-driver answers driver.ErrBadConn, and
// database/sql answers it too once its tries on other connections failed
// the same way. The acquiring statement never reached the server: the
// attempt's error must carry no Residue, whose undo would be one needless
// UPDATE. A real server refuses nothing this way on demand, hence the
// wrapped connection.
func TestUnsentStatementLeavesNoResidue(t *testing.T) {
	cfg, err := gomysql.ParseDSN(os.Getenv(storeenv.MySQLDSN))
	if err != nil {
		t.Fatal(err)
	}
	var refuse atomic.Bool
	var refused atomic.Int32
	network := "unsent-" + rand.Text()
	gomysql.RegisterDialContext(network, func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &unsentConn{Conn: c, refuse: &refuse, refused: &refused}, nil
	})
	cfg.Net = network
	connector, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { _ = db.Close() })
	_, ctx := openTestDB(t)
	const ttl = 2 * time.Second
	d := pollDriver(t, ctx, db, DefaultTable, ttl)
	req := driver.Request{Key: t.Name() + "-" + rand.Text(), Owner: rand.Text(), TTL: ttl}

	residuetest.Unsent(ctx, t, d, req, &refuse, &refused)
}

// comStmtExecute is the command byte of a prepared statement's execution
// in MySQL's client/server protocol.
const comStmtExecute = 0x17

// unsentConn is a connection to the server whose writes of a statement's
// execution fail, with nothing written, while refuse is set.
type unsentConn struct {
	net.Conn
	refuse  *atomic.Bool
	refused *atomic.Int32
}

// Write refuses the first packet of a command (sequence 0) that executes
// a prepared statement, while c.refuse is set.
func (c *unsentConn) Write(p []byte) (int, error) {
	if c.refuse.Load() && len(p) > 4 && p[3] == 0 && p[4] == comStmtExecute {
		c.refused.Add(1)
		return 0, errors.New("test: statement refused before any byte was written")
	}
	return c.Conn.Write(p)
}
