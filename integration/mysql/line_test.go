package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/lockasync"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
)

// line watches, from an admin connection, the line of waiters of one key:
// the sessions blocked in GET_LOCK for its named lock, and who holds it.
type line struct {
	t     *testing.T
	ctx   context.Context
	admin *sql.DB
	name  string
}

func newLine(t *testing.T, ctx context.Context, admin *sql.DB, key string) line {
	var database string
	if err := admin.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	return line{t: t, ctx: ctx, admin: admin, name: mysql.LockName(database, mysql.DefaultTable, key)}
}

// waiting counts the statements in line: a waiter's GET_LOCK statement
// starts with IS_FREE_LOCK of the name.
func (l line) waiting() int {
	var n int
	if err := l.admin.QueryRowContext(l.ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT('SELECT IS_FREE_LOCK(''', ?, '''%')", l.name).Scan(&n); err != nil {
		l.t.Fatal(err)
	}
	return n
}

// used reports whether some session holds the name.
func (l line) used() bool {
	var id sql.NullInt64
	if err := l.admin.QueryRowContext(l.ctx, "SELECT IS_USED_LOCK(?)", l.name).Scan(&id); err != nil {
		l.t.Fatal(err)
	}
	return id.Valid
}

// until waits for cond, failing the test when its ctx ends first.
func (l line) until(what string, cond func() bool) {
	l.t.Helper()
	for !cond() {
		if l.ctx.Err() != nil {
			l.t.Fatalf("never: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// heldLine returns a database, a ctx for the test, the line of key, and a
// lock on key whose holder has taken the key's named lock, so that waiters
// line up.
func heldLine(t *testing.T, key string) (string, context.Context, line, locker.Lock) {
	dsn := testenv.NewDatabase(t)
	_, admin := openGorm(t, dsnConfig(t, dsn, ""))
	ctx := ctxFor(t, 60*time.Second)
	ln := newLine(t, ctx, admin, key)
	holder := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(30*time.Second))
	lk, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ln.until("the holder takes the named lock", ln.used)
	return dsn, ctx, ln, lk
}

// waits returns the query ids of the statements in line (MariaDB's
// PROCESSLIST.QUERY_ID): a waiter whose wait timed out and that lined up
// again runs a statement of another id.
func (l line) waits() map[int64]bool {
	rs, err := l.admin.QueryContext(l.ctx, "SELECT QUERY_ID FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT('SELECT IS_FREE_LOCK(''', ?, '''%')", l.name)
	if err != nil {
		l.t.Fatal(err)
	}
	defer rs.Close()
	ids := map[int64]bool{}
	for rs.Next() {
		var id int64
		if err := rs.Scan(&id); err != nil {
			l.t.Fatal(err)
		}
		ids[id] = true
	}
	if err := rs.Err(); err != nil {
		l.t.Fatal(err)
	}
	return ids
}

// TestLineIsFIFO: waiters of a contended key are served in the order they
// lined up, each woken by the release before it, and a waiter that locks
// the key again right after its Unlock lines up behind the others instead
// of taking the key back (the old wake-ups woke every waiter to race for
// the row, and the releasing client usually won).
//
// A wait in line that times out lines up again at the end, by design (see
// the package doc, Limits): a run whose waits did not all last until the
// holder's Unlock (a loaded machine lining the waiters up slowly) proves
// nothing about the order, and runs again on a key of its own.
func TestLineIsFIFO(t *testing.T) {
	const n, runs = 4, 5
	dsn := testenv.NewDatabase(t)
	_, admin := openGorm(t, dsnConfig(t, dsn, ""))
	ctx := ctxFor(t, 120*time.Second)
	// The Lockers are made before the first waiter lines up, so that
	// lining the others up takes a small part of a wait in line.
	holder := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(30*time.Second))
	var waiters []locker.Locker
	for range n {
		waiters = append(waiters, newLocker(t, dsn, mysql.Config{}, locker.WithTTL(30*time.Second)))
	}
	for run := range runs {
		got, relined := lineUpAndServe(t, ctx, admin, holder, waiters, fmt.Sprintf("fifo-%d", run), 0)
		if relined {
			t.Logf("run %d: a wait in line timed out before the holder's Unlock; the order %v proves nothing", run, got)
			continue
		}
		if want := []int{0, 1, 2, 3, 0}; !slices.Equal(got, want) {
			t.Fatalf("waiters served in the order %v; want %v (the order they lined up in, the first one's second Lock last)", got, want)
		}
		return
	}
	t.Fatalf("in each of %d runs a wait in line timed out before the holder's Unlock: the machine is too slow for this test", runs)
}

// lineUpAndServe has holder lock key and the waiters line up for it one
// after the other (the first one locks it again after its Unlock), then
// unlocks it hold later, and returns the order in which the waiters were
// served. relined reports that some wait in line timed out before the
// Unlock.
func lineUpAndServe(t *testing.T, ctx context.Context, admin *sql.DB, holder locker.Locker, waiters []locker.Locker, key string, hold time.Duration) (order []int, relined bool) {
	ln := newLine(t, ctx, admin, key)
	lk, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ln.until("the holder takes the named lock", ln.used)
	served := make(chan int, len(waiters)+1)
	var wg sync.WaitGroup
	defer wg.Wait()
	seen := map[int64]bool{} // every wait seen in line
	for i, w := range waiters {
		wg.Go(func() {
			for round := range 2 {
				if round == 1 && i != 0 {
					return
				}
				wl, err := w.Lock(ctx, key)
				if err != nil {
					t.Error(err)
					served <- -1
					return
				}
				served <- i
				if err := wl.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		})
		ln.until("waiter in line", func() bool {
			now := ln.waits()
			maps.Copy(seen, now)
			return len(now) == i+1
		})
	}
	time.Sleep(hold)
	// Every wait seen in line is still there, and no other.
	relined = !maps.Equal(ln.waits(), seen)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range len(waiters) + 1 {
		order = append(order, <-served)
	}
	return order, relined
}

// TestLineKeepsItsPlace: a waiter keeps its place in line while the key
// stays held for longer than the pace of its checks of the table (500 ms
// at the default backoff), and the waiters are served in the order they
// lined up (a wait that timed out to check the table lined up again at
// the end: held for a few seconds, waiters were served in any order).
func TestLineKeepsItsPlace(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	_, admin := openGorm(t, dsnConfig(t, dsn, ""))
	ctx := ctxFor(t, 60*time.Second)
	holder := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(30*time.Second))
	var waiters []locker.Locker
	for range 4 {
		waiters = append(waiters, newLocker(t, dsn, mysql.Config{}, locker.WithTTL(30*time.Second)))
	}
	got, relined := lineUpAndServe(t, ctx, admin, holder, waiters, "long-hold", 3*time.Second)
	if relined {
		t.Errorf("a waiter left its place in line while the key was held (its wait in line ended and it lined up again at the end)")
	}
	if want := []int{0, 1, 2, 3, 0}; !slices.Equal(got, want) {
		t.Errorf("waiters served in the order %v; want %v (the order they lined up in, the first one's second Lock last)", got, want)
	}
}

// TestCancelledWaitLeavesTheLine: a waiter whose ctx ends while it waits in
// line leaves the server's line (its GET_LOCK is killed before Lock
// returns, and its connection stays usable), so that the name is not
// granted to a waiter that gave up; the next waiter is served from the
// line, holds the name while it holds the row and frees it when Unlock
// returns.
func TestCancelledWaitLeavesTheLine(t *testing.T) {
	const key = "cancelled"
	dsn, ctx, ln, lk := heldLine(t, key)

	// An hour's backoff: this waiter checks the table every second, the
	// slowest pace, beside its wait.
	quitter := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(30*time.Second), locker.WithBackoff(locker.ConstantBackoff(time.Hour)))
	qctx, cancel := context.WithCancel(ctx)
	quit := make(chan error, 1)
	go func() {
		_, err := quitter.Lock(qctx, key)
		quit <- err
	}()
	ln.until("the first waiter in line", func() bool { return ln.waiting() == 1 })

	// Also checks every second: it is served from the line, not by a
	// check.
	next := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(30*time.Second), locker.WithBackoff(locker.ConstantBackoff(time.Hour)))
	served := lockasync.Lock(ctx, next, key)
	ln.until("the second waiter in line", func() bool { return ln.waiting() == 2 })

	cancel()
	if err := <-quit; !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v; want ErrNotAcquired and context.Canceled", err)
	}
	// The killed statement answered before Lock returned (the server
	// clears a statement's text right after it answers). Not timed: a
	// statement left to its own timeout would stay 10 s, and MariaDB also
	// ends the wait of a connection the client closed, at the cost of
	// that connection.
	ln.until("the cancelled waiter leaves the server's line", func() bool { return ln.waiting() == 1 })

	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-served
	if r.Err != nil {
		t.Fatalf("the waiter second in line: %v", r.Err)
	}
	nl := r.Lock
	if !ln.used() {
		t.Errorf("the waiter served from the line does not hold the named lock while it holds the key")
	}
	if err := nl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ln.used() {
		t.Errorf("the named lock is still held after Unlock returned")
	}
	// The quitter locks the key again (a killed wait leaves its session
	// usable).
	ql, err := quitter.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := ql.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLineNameFollowsTheRow: a lock taken from the line holds the key's
// named lock on its own session from the moment Lock returns, and gives it
// up when the lock is lost (here: its row deleted behind its back), so that
// the next waiter is not held up by a holder that no longer holds the key.
func TestLineNameFollowsTheRow(t *testing.T) {
	const key = "lost-from-line"
	dsn, ctx, ln, lk := heldLine(t, key)
	w := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(time.Second))
	got := lockasync.Lock(ctx, w, key)
	ln.until("the waiter in line", func() bool { return ln.waiting() == 1 })
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Err != nil {
		t.Fatalf("the waiter in line: %v", r.Err)
	}
	wl := r.Lock
	if !ln.used() {
		t.Errorf("the lock taken from the line does not hold the named lock")
	}
	if _, err := ln.admin.ExecContext(ctx, "DELETE FROM distribute_task_lock WHERE task_name = ?", key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wl.Done():
	case <-ctx.Done():
		t.Fatal("the lock whose row was deleted was never reported lost")
	}
	ln.until("a lost lock from the line frees the named lock", func() bool { return !ln.used() })
}
