package mysql

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

// TestDeadlockVictimTriesAgain: a TryAcquire of a free key whose insert a
// deadlock rolls back (its cycle ran through other keys' gap locks: seen
// in the conformance List case beside the other cases) must take the key,
// not answer that another owner holds it. An injected 1213 stands in for
// the deadlock, which real transactions cannot make on demand. A statement
// that deadlocks every time still ends, as contention.
func TestDeadlockVictimTriesAgain(t *testing.T) {
	db, ctx := openTestDB(t)
	d := pollDriver(t, ctx, db, DefaultTable, 10*time.Second)
	deadlocks := 0
	limit := 1
	d.execErr = func(what string) error {
		if what == "insert" && deadlocks < limit {
			deadlocks++
			return &gomysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"}
		}
		return nil
	}
	req := driver.Request{Key: t.Name() + "-" + rand.Text(), Owner: rand.Text(), TTL: 10 * time.Second}
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("TryAcquire of a free key whose insert was a deadlock's victim once: %v", err)
	}
	if err := d.Release(ctx, driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: req.TTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
	deadlocks, limit = 0, 1<<30
	req = driver.Request{Key: t.Name() + "-" + rand.Text(), Owner: rand.Text(), TTL: 10 * time.Second}
	_, err = d.TryAcquire(ctx, req)
	var held *driver.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("a statement that deadlocks every time must end as contention (held), got %v", err)
	}
	if deadlocks != deadlockTries {
		t.Errorf("the insert ran %d times, want %d", deadlocks, deadlockTries)
	}
}

// TestLateInsertTriesAgain: the insert of a free key waits for the pool's
// one connection past its fence (TTL/4), so it takes nothing; nobody holds
// the key, so the attempt must insert again, not answer that another owner
// holds it (seen in the conformance List case with a pool of 8).
func TestLateInsertTriesAgain(t *testing.T) {
	d, ctx := lateDriver(t, "insert", 1)
	req := driver.Request{Key: t.Name() + "-" + rand.Text(), Owner: rand.Text(), TTL: d.ttl}
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("TryAcquire of a free key whose insert reached the database after its fence: %v", err)
	}
	if err := d.Release(ctx, driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: req.TTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
}

// TestLateAcquireTriesAgain: a key whose row exists and is free (released);
// its first two acquiring UPDATEs wait for the pool's one connection past
// their fences, so they take nothing. The attempt must try again while the
// row is free, not answer that another owner holds it.
func TestLateAcquireTriesAgain(t *testing.T) {
	d, ctx := lateDriver(t, "acquire", 0)
	req := driver.Request{Key: t.Name() + "-" + rand.Text(), Owner: rand.Text(), TTL: d.ttl}
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: req.TTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
	d.late = 2
	req.Owner = rand.Text()
	g, err = d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("TryAcquire of a free key whose acquiring statements reached the database after their fences: %v", err)
	}
	if d.late != 0 {
		t.Fatalf("%d late statements left: the attempt did not run as the test means", d.late)
	}
	if err := d.Release(ctx, driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: req.TTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
}

// lateTestDriver is a driver on a pool of one connection whose next late
// statements of one kind wait for that connection past their fences.
type lateTestDriver struct {
	*sqlDriver
	ttl  time.Duration
	late int
}

// lateDriver returns a lateTestDriver whose next late statements named
// what ("insert", "acquire") reach the database after their fences: just
// before each, another query takes the pool's one connection for longer
// than the fence window.
func lateDriver(t *testing.T, what string, late int) (*lateTestDriver, context.Context) {
	db, ctx := openTestDB(t)
	db.SetMaxOpenConns(1)
	ld := &lateTestDriver{sqlDriver: pollDriver(t, ctx, db, DefaultTable, time.Second), ttl: time.Second, late: late}
	var busy sync.WaitGroup
	t.Cleanup(busy.Wait)
	ld.execErr = func(name string) error {
		if name != what || ld.late == 0 {
			return nil
		}
		ld.late--
		inUse := db.Stats().InUse
		busy.Add(1)
		slept := make(chan struct{})
		go func() {
			defer busy.Done()
			defer close(slept)
			if _, err := db.ExecContext(ctx, "SELECT SLEEP(?)", (driver.FenceWindow(ld.ttl) + 500*time.Millisecond).Seconds()); err != nil {
				t.Error(err)
			}
		}()
		// Until the SLEEP holds the pool's one connection; a SLEEP that
		// failed, or ended before this loop looked, ends the wait too.
		for db.Stats().InUse <= inUse {
			select {
			case <-slept:
				return nil
			case <-ctx.Done():
				t.Errorf("the SLEEP never took the pool's connection: %v", ctx.Err())
				return nil
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	}
	return ld, ctx
}
