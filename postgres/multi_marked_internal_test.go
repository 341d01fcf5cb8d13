package postgres

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/golocker/locker/driver"
)

// TestMultiSeesKeyMarkedMeanwhile: a TryAcquireMulti whose key's row a
// shared attempt marks as held by shared holds (and adds a live hold)
// while the statement waits for that row fails with driver.ErrConflict, as
// it does when the row was marked before it started: a key used both as a
// lock and as a semaphore must get locker.ErrInvalidOption, not
// ErrNotAcquired.
func TestMultiSeesKeyMarkedMeanwhile(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%dkeys", n), func(t *testing.T) {
			d, ctx, key := sharedDriver(t)
			pool := d.q.(poolQuerier).p
			tbl, stbl := quoteIdent(DefaultTable), quoteIdent(DefaultTable+sharedSuffix)
			// The row is free.
			if _, err := pool.Exec(ctx, "INSERT INTO "+tbl+" (task_name, task_status, version, owner_token, owner_label, lock_until, start_time, update_time)"+
				" VALUES ($1, 'FINISH', 100, 'gone', 'gone', clock_timestamp(), clock_timestamp(), clock_timestamp())", key); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_, _ = pool.Exec(t.Context(), "DELETE FROM "+stbl+" WHERE task_name LIKE $1 || '%'", key)
				_, _ = pool.Exec(t.Context(), "DELETE FROM "+tbl+" WHERE task_name LIKE $1 || '%'", key)
			})
			// A shared attempt holds the row, marks it and adds a hold: it
			// commits once the multi-key statement waits for the row.
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(t.Context()) }()
			for _, stmt := range []string{
				"SELECT 1 FROM " + tbl + " WHERE task_name = $1 FOR UPDATE",
				"UPDATE " + tbl + " SET task_status = 'RUNNING', version = version + 1, owner_token = " + sharedOwnerSQL + ", owner_label = '" + sharedLabel + "'," +
					" lock_until = clock_timestamp() + interval '10 seconds' WHERE task_name = $1",
				"INSERT INTO " + stbl + " (task_name, owner_token, mode, weight, share_limit, token, queued, kept, owner_label, lock_until, start_time)" +
					" VALUES ($1, 'holder', " + fmt.Sprint(int(driver.Permits)) + ", 1, 2, 101, 0, false, 'holder', clock_timestamp() + interval '10 seconds', clock_timestamp())",
			} {
				if _, err := tx.Exec(ctx, stmt, key); err != nil {
					t.Fatal(err)
				}
			}
			var reqs []driver.Request
			for i := range n {
				k := key
				if i > 0 {
					k = fmt.Sprintf("%s/other-%d", key, i)
				}
				reqs = append(reqs, driver.Request{Key: k, Owner: fmt.Sprintf("multi.%x", rand.Uint64()), TTL: sharedTTL})
			}
			res := make(chan error, 1)
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				_, err := d.TryAcquireMulti(ctx, reqs)
				res <- err
			}()
			awaitRowWait(ctx, t, pool, "TryAcquireMulti", "WITH v AS MATERIALIZED%", returned)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-res; !errors.Is(err, driver.ErrConflict) {
				t.Fatalf("TryAcquireMulti on a key that shared holds took meanwhile = %v; want driver.ErrConflict (the key is a semaphore's, not a lock's)", err)
			}
		})
	}
}
