package mysql

import (
	"crypto/rand"
	"errors"
	"log/slog"
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
	d := newDriver(db, Config{PollOnly: true, Table: DefaultTable}, 0)
	if err := d.Configure(ctx, driver.Config{TTL: 10 * time.Second, Logger: slog.New(slog.DiscardHandler), Backoff: func(int) time.Duration { return 10 * time.Millisecond }}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
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
	db, ctx := openTestDB(t)
	db.SetMaxOpenConns(1)
	const ttl = time.Second
	d := newDriver(db, Config{PollOnly: true, Table: DefaultTable}, 0)
	if err := d.Configure(ctx, driver.Config{TTL: ttl, Logger: slog.New(slog.DiscardHandler), Backoff: func(int) time.Duration { return 10 * time.Millisecond }}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	busy := make(chan error, 1)
	first := true
	d.execErr = func(what string) error {
		if what != "insert" || !first {
			return nil
		}
		first = false
		// Another query takes the one connection for longer than the
		// fence window, just before the insert asks for it.
		go func() {
			_, err := db.ExecContext(ctx, "SELECT SLEEP(?)", (driver.FenceWindow(ttl) + 500*time.Millisecond).Seconds())
			busy <- err
		}()
		for db.Stats().InUse < 1 {
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	req := driver.Request{Key: t.Name() + "-" + rand.Text(), Owner: rand.Text(), TTL: ttl}
	g, err := d.TryAcquire(ctx, req)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("TryAcquire of a free key whose insert reached the database after its fence: %v", err)
	}
	if err := d.Release(ctx, driver.Lease{Key: req.Key, Owner: req.Owner, Token: g.Token, TTL: req.TTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
}
