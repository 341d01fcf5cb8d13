package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker/driver"
)

// TestMultiLateStatementTriesAgain: a TryAcquireMulti of free keys whose
// statement waits for the pool's one connection past its fence takes
// nothing; nobody holds the keys, so it must send a statement with a fresh
// fence and take them, not answer that another owner holds them (seen in
// CI under load as TestMultiSeesKeyMarkedMeanwhile answering held).
func TestMultiLateStatementTriesAgain(t *testing.T) {
	d, ctx, key := sharedDriverConns(t, 1)
	reqs := []driver.Request{
		{Key: key + "/a", Owner: fmt.Sprintf("multi.%x", rand.Uint64()), TTL: sharedTTL},
		{Key: key + "/b", Owner: fmt.Sprintf("multi.%x", rand.Uint64()), TTL: sharedTTL},
	}
	var grants []driver.Grant
	err := late(ctx, t, d, func() (err error) {
		grants, err = d.TryAcquireMulti(ctx, reqs)
		return err
	})
	if err != nil {
		t.Fatalf("TryAcquireMulti of free keys whose statement reached the database after its fence: %v", err)
	}
	for i, g := range grants {
		if err := d.Release(ctx, driver.Lease{Key: reqs[i].Key, Owner: reqs[i].Owner, Token: g.Token, TTL: sharedTTL, State: g.State}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLateStatementTriesAgain: as TestMultiLateStatementTriesAgain, for
// one key's TryAcquire.
func TestLateStatementTriesAgain(t *testing.T) {
	d, ctx, key := sharedDriverConns(t, 1)
	req := driver.Request{Key: key, Owner: fmt.Sprintf("late.%x", rand.Uint64()), TTL: sharedTTL}
	var g driver.Grant
	err := late(ctx, t, d, func() (err error) {
		g, err = d.TryAcquire(ctx, req)
		return err
	})
	if err != nil {
		t.Fatalf("TryAcquire of a free key whose statement reached the database after its fence: %v", err)
	}
	if err := d.Release(ctx, driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: sharedTTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
}

// late runs call while the test holds the one connection of d's pool, and
// lets it go past the fence window of sharedTTL: call's statement reaches
// the database after its fence, which runs from before its wait for the
// connection. It returns call's error.
func late(ctx context.Context, t *testing.T, d notifyingDriver, call func() error) error {
	conn, err := d.q.(poolQuerier).p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { res <- call() }()
	time.Sleep(driver.FenceWindow(sharedTTL) + 500*time.Millisecond)
	conn.Release()
	return <-res
}

// TestReleaseRetriesSerializationFailure: on sessions that default to
// SERIALIZABLE, a release that waited for the row while another
// transaction changed it is rolled back by a serialization failure
// (40001); it freed nothing and must run again, not fail the Unlock (seen
// in CI's TestSerializable).
func TestReleaseRetriesSerializationFailure(t *testing.T) {
	d, ctx, key := sharedDriverWith(t, func(pc *pgxpool.Config) {
		pc.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	})
	pool := d.q.(poolQuerier).p
	req := driver.Request{Key: key, Owner: fmt.Sprintf("serial.%x", rand.Uint64()), TTL: sharedTTL}
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(t.Context()) }()
	if _, err := tx.Exec(ctx, "UPDATE "+quoteIdent(DefaultTable)+" SET update_time = clock_timestamp() WHERE task_name = $1", key); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		res <- d.Release(ctx, driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: sharedTTL, State: g.State})
	}()
	for {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FINISH%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("Release after a serialization failure: %v", err)
	}
}
