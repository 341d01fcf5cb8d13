package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// txQueriers names the two queriers, for the tests that run on both.
var txQueriers = []string{"Pool", "SQLDB"}

// txDriver returns a driver on a pgx pool or, via "SQLDB", on a *sql.DB
// opened with pgx/stdlib, with a TTL of sharedTTL, a ctx for the test and
// a free key.
func txDriver(t *testing.T, via string) (*pgDriver, context.Context, string) {
	if via == "Pool" {
		d, ctx, key := sharedDriver(t)
		return d.pgDriver, ctx, key
	}
	d, ctx := sqlDBDriver(t, nil)
	return d, ctx, fmt.Sprintf("sharetx-internal/%x", rand.Uint64())
}

// sqlDBDriver returns a driver on a *sql.DB opened with pgx/stdlib on the
// test's server, with a TTL of sharedTTL, and a ctx for the test. wrap,
// unless nil, wraps each connection the *sql.DB dials.
func sqlDBDriver(t *testing.T, wrap func(net.Conn) net.Conn) (*pgDriver, context.Context) {
	t.Helper()
	srv := storeenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	cc, err := pgx.ParseConfig(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		dial := cc.DialFunc
		cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return wrap(c), nil
		}
	}
	db := stdlib.OpenDB(*cc)
	t.Cleanup(func() { _ = db.Close() })
	return testDriver(ctx, t, newDBQuerier(db)), ctx
}

// endSession ends the session of tx from another connection of d, as the
// server ends one idle in its transaction for longer than
// idle_in_transaction_session_timeout, and waits until it is gone.
func endSession(ctx context.Context, d *pgDriver, tx runner) error {
	var pid int32
	if err := tx.query(ctx, "SELECT pg_backend_pid()", nil, func(scan func(...any) error) error { return scan(&pid) }); err != nil {
		return err
	}
	if _, err := d.q.exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		return err
	}
	for {
		gone := false
		err := d.q.query(ctx, "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", []any{pid},
			func(scan func(...any) error) error { return scan(&gone) })
		if err != nil || gone {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// heldByTwo takes two permits of key, of which the second is a shared
// hold in the table of shared holds, and returns their owners.
func heldByTwo(ctx context.Context, t *testing.T, d *pgDriver, key string) []string {
	t.Helper()
	permit := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1}
	var owners []string
	for range 2 {
		req := driver.Request{Key: key, Owner: fmt.Sprintf("tx.%x", rand.Uint64()), TTL: sharedTTL}
		if _, err := d.TryAcquireShared(ctx, req, permit); err != nil {
			t.Fatal(err)
		}
		owners = append(owners, req.Owner)
	}
	return owners
}

// TestTxOutlivesEndedSession checks, for each transaction on shared holds
// (an undo, a break, a new limit) and on both queriers, that one whose
// session ended before its commit (here: terminated from another
// connection, as the server ends one idle in its transaction for longer
// than idle_in_transaction_session_timeout, a third of the TTL, when its
// client stalls on a loaded machine) runs again on another connection: it
// was rolled back, so nothing of it was done, and the call must not fail
// with the closed connection's error.
func TestTxOutlivesEndedSession(t *testing.T) {
	for _, via := range txQueriers {
		for _, c := range []struct {
			name string
			// run is the call, on key held by two permits of owners.
			run func(ctx context.Context, d *pgDriver, key string, owners []string) error
		}{
			{"Undo", func(ctx context.Context, d *pgDriver, key string, owners []string) error {
				return d.undoShare(ctx, key, owners[1])
			}},
			{"Break", func(ctx context.Context, d *pgDriver, key string, _ []string) error {
				return d.breakShared(ctx, key)
			}},
			{"SetLimit", func(ctx context.Context, d *pgDriver, key string, _ []string) error {
				return d.SetLimit(ctx, key, 3)
			}},
		} {
			t.Run(via+"/"+c.name, func(t *testing.T) {
				d, ctx, key := txDriver(t, via)
				owners := heldByTwo(ctx, t, d, key)
				stalls := 0
				d.txStall = func(tx runner) error {
					if stalls++; stalls == 1 {
						return endSession(ctx, d, tx)
					}
					return nil
				}
				if err := c.run(ctx, d, key, owners); err != nil {
					t.Fatalf("a transaction whose session ended before its commit must run again, not fail: %v", err)
				}
				if stalls < 2 {
					t.Fatalf("the transaction succeeded after its session ended without a second one (%d)", stalls)
				}
			})
		}
	}
}

// TestTxEndedSessionEveryTime checks that a transaction on shared holds
// whose session ends before its commit in every try runs txTries times,
// not more, and reports an error that says it was rolled back.
func TestTxEndedSessionEveryTime(t *testing.T) {
	for _, via := range txQueriers {
		t.Run(via, func(t *testing.T) {
			d, ctx, key := txDriver(t, via)
			heldByTwo(ctx, t, d, key)
			stalls := 0
			d.txStall = func(tx runner) error {
				stalls++
				return endSession(ctx, d, tx)
			}
			err := d.breakShared(ctx, key)
			switch {
			case err == nil:
				t.Fatal("a break whose session ended in every try succeeded")
			case !errors.Is(err, errRolledBack):
				t.Errorf("a break whose session ended before its commit in every try is not reported rolled back: %v", err)
			}
			if stalls != txTries {
				t.Errorf("a transaction whose session ended before its commit in every try ran %d times; want %d", stalls, txTries)
			}
		})
	}
}

// TestInTxBrokenCommitNotRetried checks, on both queriers, that a
// transaction on shared holds whose session ended when its commit was due
// is neither run again nor reported as rolled back: on a connection that
// closes during the commit, the commit may have reached the server, so
// its outcome is unknown.
func TestInTxBrokenCommitNotRetried(t *testing.T) {
	for _, via := range txQueriers {
		t.Run(via, func(t *testing.T) {
			d, ctx, _ := txDriver(t, via)
			runs := 0
			err := d.inTx(ctx, func(tx runner) error {
				runs++
				return endSession(ctx, d, tx)
			})
			switch {
			case err == nil:
				t.Fatal("a commit on a connection whose session ended succeeded")
			case errors.Is(err, errRolledBack):
				t.Errorf("a commit whose connection closed counts as rolled back: %v", err)
			}
			if runs != 1 {
				t.Errorf("a transaction whose commit met a closed connection ran %d times; want 1", runs)
			}
		})
	}
}
