package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/memory"
	"github.com/golocker/locker/mysql"
)

// newLocker returns a Locker with its own GORM handle on dsn, closed when the
// test ends.
func newLocker(t testing.TB, dsn string, cfg mysql.Config, opts ...locker.Option) locker.Locker {
	t.Helper()
	gdb, _ := openGorm(t, dsnConfig(t, dsn, ""))
	l, err := cfg.New(gdb, opts...)
	if err != nil {
		t.Fatalf("mysql.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestNewRejectsBadArguments(t *testing.T) {
	_, err := mysql.New(nil)
	if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "nil *gorm.DB") {
		t.Errorf("New(nil) = %v; want ErrInvalidOption naming the nil *gorm.DB", err)
	}
	_, err = mysql.New(&gorm.DB{Config: &gorm.Config{}})
	if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "dialect") {
		t.Errorf("New(db without dialect) = %v; want ErrInvalidOption naming the dialect", err)
	}

	gdb, _ := openGorm(t, dsnConfig(t, testenv.MySQL(t).DSN(), ""))
	for _, table := range []string{"bad-name", "x;DROP TABLE y", "tâble", strings.Repeat("t", 65), "a b"} {
		_, err := mysql.Config{Table: table}.New(gdb)
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "Config.Table") {
			t.Errorf("Config{Table: %q}.New = %v; want ErrInvalidOption naming Config.Table", table, err)
		}
	}
	_, err = mysql.New(gdb, locker.WithTTL(time.Millisecond))
	if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "WithTTL") {
		t.Errorf("New(WithTTL(1ms)) = %v; want ErrInvalidOption naming WithTTL", err)
	}
}

func TestKeyLimit(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	l := newLocker(t, dsn, mysql.Config{}, locker.WithPrefix("p/"))
	ctx := ctxFor(t, 30*time.Second)
	ok := strings.Repeat("k", mysql.MaxKeyBytes-2)
	lk, err := l.TryLock(ctx, ok)
	if err != nil {
		t.Fatalf("a key of %d bytes with its prefix must work: %v", mysql.MaxKeyBytes, err)
	}
	_ = lk.Unlock(ctx)
	_, err = l.TryLock(ctx, ok+"k")
	if !errors.Is(err, locker.ErrInvalidKey) || !strings.Contains(err.Error(), fmt.Sprint(mysql.MaxKeyBytes)) {
		t.Errorf("a key of %d bytes with its prefix: %v; want ErrInvalidKey naming the limit %d", mysql.MaxKeyBytes+1, err, mysql.MaxKeyBytes)
	}
}

// Keys are compared byte by byte: no collation folds case or trailing
// spaces.
func TestKeysAreBinary(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	a, b := newLocker(t, dsn, mysql.Config{}), newLocker(t, dsn, mysql.Config{})
	ctx := ctxFor(t, 30*time.Second)
	keys := []string{"a", "A", "a ", "ä", "a\u0308"}
	for _, k := range keys {
		if _, err := a.TryLock(ctx, k); err != nil {
			t.Fatalf("TryLock(%q): %v: distinct byte strings must be distinct keys", k, err)
		}
	}
	for _, k := range keys {
		if _, err := b.TryLock(ctx, k); !errors.Is(err, locker.ErrNotAcquired) {
			t.Errorf("TryLock(%q) by another Locker: %v; want ErrNotAcquired", k, err)
		}
	}
}

// Five replicas starting at once on an empty database all succeed and share
// one lock table (and its table of shared holds).
func TestConcurrentSchemaCreation(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	const n = 5
	handles := make([]*gorm.DB, n)
	for i := range handles {
		handles[i], _ = openGorm(t, dsnConfig(t, dsn, ""))
	}
	lockers := make([]locker.Locker, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			lockers[i], errs[i] = mysql.New(handles[i], locker.WithTTL(2*time.Second))
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: New: %v", i, err)
		}
		t.Cleanup(func() { _ = lockers[i].Close() })
	}
	ctx := ctxFor(t, 30*time.Second)
	if _, err := lockers[0].TryLock(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	for i, l := range lockers[1:] {
		if _, err := l.TryLock(ctx, "job"); !errors.Is(err, locker.ErrNotAcquired) {
			t.Errorf("replica %d: TryLock on a held key: %v; want ErrNotAcquired", i+1, err)
		}
	}
	_, admin := openGorm(t, dsnConfig(t, dsn, ""))
	var tables int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 2 {
		t.Errorf("%d tables in the database; want 2 (the lock table and its table of shared holds)", tables)
	}
}

func TestSkipMigration(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	gdb, admin := openGorm(t, dsnConfig(t, dsn, ""))
	_, err := mysql.Config{SkipMigration: true}.New(gdb)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("SkipMigration without the table: %v; want an error saying it does not exist", err)
	}
	// The seed design's table: same name, other shape.
	ctx := ctxFor(t, 30*time.Second)
	if _, err := admin.ExecContext(ctx, "CREATE TABLE distribute_task_lock (task_name VARCHAR(512) NOT NULL PRIMARY KEY,"+
		" task_status VARCHAR(255) NOT NULL, version BIGINT NOT NULL, update_time BIGINT NOT NULL,"+
		" start_time BIGINT NOT NULL, finish_time BIGINT NULL)"); err != nil {
		t.Fatal(err)
	}
	_, err = mysql.New(gdb)
	if err == nil || !strings.Contains(err.Error(), "owner_token") || !strings.Contains(err.Error(), "lock_until") {
		t.Errorf("New on a table of another shape: %v; want an error naming the missing columns", err)
	}
	l, err := mysql.Config{Table: "team_locks"}.New(gdb)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	l, err = mysql.Config{Table: "team_locks", SkipMigration: true}.New(gdb)
	if err != nil {
		t.Fatalf("SkipMigration on an existing table: %v", err)
	}
	_ = l.Close()
}

// Round trips are counted on the real connection: an uncontended Lock of a
// known key is one statement, of a new key two, and Unlock one. Only the
// calls' own statements count (see markCall), not the named lock that the
// holder goroutine takes takeDelay after the acquisition when the calls
// are slower than that.
func TestRoundTrips(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	var rec recorder
	gdb, _ := openRecorded(t, dsnConfig(t, dsn, ""), &rec)
	l, err := mysql.New(gdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxFor(t, 30*time.Second)
	run := func(key string) []string {
		rec.take()
		cctx, call := markCall(ctx)
		lk, err := l.Lock(cctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(cctx); err != nil {
			t.Fatal(err)
		}
		return rec.statementsOf(call)
	}
	if qs := run("new"); len(qs) != 3 {
		t.Errorf("Lock+Unlock of a new key sent %d statements; want 3 (UPDATE, INSERT, release): %q", len(qs), heads(qs))
	}
	if qs := run("new"); len(qs) != 2 {
		t.Errorf("Lock+Unlock of a known key sent %d statements; want 2: %q", len(qs), heads(qs))
	}
}

// TestSharedRoundTrips: an uncontended permit or read hold of a key whose
// row exists costs one statement to take and one to give back, as
// Lock+Unlock does; the first use of a key runs the transaction. A plain
// lock of the key afterwards still gets it. Only the calls' own statements
// count (see markCall): the key's named lock, which the holder goroutine
// takes takeDelay after the acquisition and gives back after the release,
// falls in a call's window whenever the call is slower than that.
func TestSharedRoundTrips(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	var rec recorder
	gdb, _ := openRecorded(t, dsnConfig(t, dsn, ""), &rec)
	l, err := mysql.New(gdb, locker.WithPrefix(t.Name()+"-"+rand.Text()[:8]+"/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxFor(t, 30*time.Second)
	sem, _ := locker.NewSemaphore(l, "sem", 4)
	rw, _ := locker.NewRWMutex(l, "rw")
	for name, take := range map[string]func(context.Context) (locker.Lock, error){
		"permit":    func(ctx context.Context) (locker.Lock, error) { return sem.Acquire(ctx) },
		"read hold": func(ctx context.Context) (locker.Lock, error) { return rw.RLock(ctx) },
	} {
		for i := range 3 {
			rec.take()
			tctx, taking := markCall(ctx)
			h, err := take(tctx)
			if err != nil {
				t.Fatal(err)
			}
			gctx, giving := markCall(ctx)
			if err := h.Unlock(gctx); err != nil {
				t.Fatal(err)
			}
			took, gave := rec.statementsOf(taking), rec.statementsOf(giving)
			if i > 0 && (len(took) != 1 || len(gave) != 1) {
				t.Errorf("a %s of a key used before sent %d statements to take and %d to give back; want 1 and 1: took %q, gave %q",
					name, len(took), len(gave), heads(took), heads(gave))
			}
		}
	}
	lk, err := l.TryLock(ctx, "sem")
	if err != nil {
		t.Fatalf("TryLock of a key whose permits all left: %v", err)
	}
	_ = lk.Unlock(ctx)
}

// TestClockSkew: replicas whose sessions disagree about the time (different
// time_zone settings, which shift NOW() by hours) never both hold a key,
// because every expiry decision uses UTC_TIMESTAMP on the server and no
// client clock value is ever sent.
func TestClockSkew(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	var rec recorder
	skewed := func(tz string) (locker.Locker, *sql.DB) {
		cfg := dsnConfig(t, dsn, "")
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["time_zone"] = "'" + tz + "'"
		gdb, sqlDB := openRecorded(t, cfg, &rec)
		l, err := mysql.New(gdb, locker.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l, sqlDB
	}
	ahead, aheadDB := skewed("+09:00")
	behind, behindDB := skewed("-09:00")
	ctx := ctxFor(t, 60*time.Second)

	// The sessions' NOW() are 18 hours apart: code comparing NOW() across
	// them would let "behind" take a lock "ahead" holds for hours.
	var a, b int64
	if err := aheadDB.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(NOW()) - UNIX_TIMESTAMP(UTC_TIMESTAMP())").Scan(&a); err != nil {
		t.Fatal(err)
	}
	if err := behindDB.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(NOW()) - UNIX_TIMESTAMP(UTC_TIMESTAMP())").Scan(&b); err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("the sessions' time zones did not apply (offsets %d and %d)", a, b)
	}
	rec.take() // the statements above read NOW() on purpose

	for i, pair := range [][2]locker.Locker{{ahead, behind}, {behind, ahead}} {
		key := fmt.Sprint("skew-", i)
		lk, err := pair[0].TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pair[1].TryLock(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
			t.Errorf("TryLock by a skewed replica while the key is held: %v; want ErrNotAcquired", err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Mutual exclusion under contention between the two.
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for _, l := range []locker.Locker{ahead, behind} {
		wg.Go(func() {
			for range 30 {
				lk, err := l.Lock(ctx, "contended")
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := lk.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if overlaps.Load() > 0 {
		t.Errorf("%d overlapping holds between skewed replicas; a key must never be granted twice", overlaps.Load())
	}

	// No statement of the Lockers carried a client time.
	for _, e := range rec.take() {
		for _, arg := range e.args {
			if _, ok := arg.Value.(time.Time); ok {
				t.Errorf("statement %q was sent a client time %v", e.query, arg.Value)
			}
		}
		if q := strings.ToUpper(e.query); strings.Contains(q, "NOW(") || strings.Contains(q, "CURRENT_TIMESTAMP") || strings.Contains(q, "SYSDATE") {
			t.Errorf("statement %q reads the session-zone clock; use UTC_TIMESTAMP(6)", e.query)
		}
	}
}

// TestNoClientClockInStatements checks the source: the package reads the
// local clock only in notify.go, to schedule wake-ups, never where
// statements are built or their arguments computed.
func TestNoClientClockInStatements(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Until") && name != "notify.go" {
				t.Errorf("%s: time.%s: only notify.go may read the local clock (wake-up timers)", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			for _, bad := range []string{"NOW(", "CURRENT_TIMESTAMP", "SYSDATE(", "UNIX_TIMESTAMP("} {
				if strings.Contains(strings.ToUpper(lit.Value), bad) {
					t.Errorf("%s: SQL reads %s: expiry must use UTC_TIMESTAMP(6)", fset.Position(lit.Pos()), bad)
				}
			}
			return true
		})
	}
}

// TestRunRecord: the row keeps the latest run's record, after a success and
// after a crash.
func TestRunRecord(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	gdb, _ := openGorm(t, dsnConfig(t, dsn, ""))
	const ttl = time.Second
	worker := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(ttl), locker.WithOwnerLabel("worker-1"), locker.WithPrefix("jobs/"))
	ctx := ctxFor(t, 60*time.Second)

	if _, err := mysql.LastRun(ctx, gdb, "", "jobs/report"); !errors.Is(err, mysql.ErrNoRun) {
		t.Errorf("LastRun of a key never locked: %v; want ErrNoRun", err)
	}
	var token uint64
	err := locker.Do(ctx, worker, "report", func(ctx context.Context) error {
		lk, _ := worker.TryLock(ctx, "report") // nested hold: the token
		token = lk.Token()
		r, err := mysql.LastRun(ctx, gdb, "", "jobs/report")
		if err != nil {
			return err
		}
		if r.State != mysql.Running || !r.Held || r.OwnerLabel != "worker-1" || r.Version != token ||
			!r.FinishTime.IsZero() || !r.LockUntil.After(r.StartTime) {
			t.Errorf("record while running: %+v; want RUNNING, held, worker-1, version %d, no finish time", r, token)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := mysql.LastRun(ctx, gdb, "", "jobs/report")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != mysql.Finished || r.Held || r.Version != token || r.OwnerLabel != "worker-1" ||
		r.FinishTime.IsZero() || r.FinishTime.Before(r.StartTime) || r.UpdateTime.Before(r.FinishTime) ||
		r.StartTime.Location() != time.UTC {
		t.Errorf("record after success: %+v; want FINISH, not held, worker-1, version %d, start ≤ finish ≤ update in UTC", r, token)
	}

	// A crash: the pool closes without unlocking.
	crashDB, crashSQL := openGorm(t, dsnConfig(t, dsn, ""))
	crasher, err := mysql.New(crashDB, locker.WithTTL(ttl), locker.WithOwnerLabel("worker-2"), locker.WithPrefix("jobs/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = crasher.Close() })
	lk, err := crasher.TryLock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	_ = crashSQL.Close()
	<-lk.Done() // the crashed process's lock ends locally too
	deadline := time.Now().Add(10 * ttl)
	for {
		r, err = mysql.LastRun(ctx, gdb, "", "jobs/report")
		if err != nil {
			t.Fatal(err)
		}
		if !r.Held || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r.State != mysql.Running || r.Held || r.OwnerLabel != "worker-2" || r.Version != lk.Token() || !r.FinishTime.IsZero() {
		t.Errorf("record after a crash: %+v; want RUNNING but not held, worker-2, version %d, no finish time", r, lk.Token())
	}
	// The next run takes over with a higher version.
	lk2, err := worker.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if lk2.Token() <= lk.Token() {
		t.Errorf("token after takeover %d; want above the crashed run's %d", lk2.Token(), lk.Token())
	}
	_ = lk2.Unlock(ctx)
}

// TestGuard: a stale holder's guarded transaction rolls back.
func TestGuard(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	app, appSQL := openGorm(t, dsnConfig(t, dsn, "")) // the application's own handle
	ctx := ctxFor(t, 60*time.Second)
	if _, err := appSQL.ExecContext(ctx, "CREATE TABLE ledger (id INT PRIMARY KEY, n INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := appSQL.ExecContext(ctx, "INSERT INTO ledger VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	f := newFleet(t, dsn, mysql.Config{})
	f.ttl, f.prefix = ttl, ""
	stale, fresh := f.newLocker(t), f.newLocker(t)
	t.Cleanup(func() { _ = stale.Close(); _ = fresh.Close() })
	write := func(lk locker.Lock) error {
		return app.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := mysql.Guard(tx, lk); err != nil {
				return err
			}
			return tx.Exec("UPDATE ledger SET n = n + 1 WHERE id = 1").Error
		})
	}
	balance := func() int {
		var n int
		if err := appSQL.QueryRowContext(ctx, "SELECT n FROM ledger WHERE id = 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	lkA, err := stale.TryLock(ctx, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(lkA); err != nil {
		t.Fatalf("guarded write by the holder: %v", err)
	}
	// The holder is cut off; its lease runs out and another replica takes
	// over. The stale holder's process still runs and tries to write.
	heal := f.harness().Isolate(t, stale)
	lkB, err := fresh.Lock(ctx, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	heal()
	if err := write(lkA); !errors.Is(err, locker.ErrLost) {
		t.Errorf("guarded write by a stale holder: %v; want ErrLost", err)
	}
	if err := write(lkB); err != nil {
		t.Errorf("guarded write by the new holder: %v", err)
	}
	if n := balance(); n != 2 {
		t.Errorf("balance %d; want 2: the stale holder's write must roll back", n)
	}
	// Guard after Unlock, outside a transaction, with another backend's Lock.
	if err := lkB.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := write(lkB); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("guarded write after Unlock: %v; want ErrNotHeld", err)
	}
	lkC, err := fresh.TryLock(ctx, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer lkC.Unlock(ctx)
	if err := mysql.Guard(app, lkC); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("Guard outside a transaction: %v; want ErrInvalidOption", err)
	}
	mem, _ := memory.New(memory.NewStore())
	defer mem.Close()
	memLock, _ := mem.TryLock(ctx, "ledger")
	err = app.Transaction(func(tx *gorm.DB) error { return mysql.Guard(tx, memLock) })
	if !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("Guard with a memory Lock: %v; want ErrInvalidOption", err)
	}
	if n := balance(); n != 2 {
		t.Errorf("balance %d; want 2", n)
	}

	// The store decides, not the local state: a holder whose next renewal
	// is seconds away still believes it holds the lock when its row moves
	// on (here an operator hands the row to version+1, as a takeover would).
	slow := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(time.Minute))
	lkD, err := slow.TryLock(ctx, "ledger-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appSQL.ExecContext(ctx, "UPDATE distribute_task_lock SET version = version + 1, owner_token = 'other' WHERE task_name = 'ledger-2'"); err != nil {
		t.Fatal(err)
	}
	if lkD.Err() != nil {
		t.Fatalf("the local state noticed already: %v", lkD.Err())
	}
	if err := write(lkD); !errors.Is(err, locker.ErrLost) {
		t.Errorf("guarded write by a holder whose row was taken over: %v; want ErrLost from the row check", err)
	}
	if n := balance(); n != 2 {
		t.Errorf("balance %d; want 2: the stale write must roll back", n)
	}
}

// TestBatchRenewal: renewing hundreds of locks at once, the ones deleted or
// taken behind the Locker's back are reported lost, the others stay held.
// A round in which an untouched lock was lost only because no renewal came
// back in time (rerun.StarvedLoss) says nothing, and runs again on keys of
// its own, up to three rounds; one lost any other way fails at once.
func TestBatchRenewal(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	const ttl = time.Second
	l := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(ttl))
	_, admin := openGorm(t, dsnConfig(t, dsn, ""))
	ctx := ctxFor(t, 3*time.Minute)
	rerun.Starved(t, 3, func(attempt int) error {
		return batchRenewalRound(ctx, t, l, admin, ttl, fmt.Sprintf("b%d-", attempt))
	})
}

// batchRenewalRound is one round of TestBatchRenewal on keys named with
// prefix. It returns an untouched lock's loss to renewals that never came
// back, and fails t on any other fault.
func batchRenewalRound(ctx context.Context, t *testing.T, l locker.Locker, admin *sql.DB, ttl time.Duration, prefix string) error {
	const n = 600 // two chunks
	locks := make([]locker.Lock, 0, n)
	defer func() {
		for _, lk := range locks {
			_ = lk.Unlock(ctx)
		}
	}()
	for i := range n {
		lk, err := l.TryLock(ctx, fmt.Sprint(prefix, i))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
	}
	lost := map[int]bool{3: true, 300: true, 599: true, 7: true, 513: true}
	for i := range lost {
		q := "DELETE FROM distribute_task_lock WHERE task_name = ?"
		if i%2 == 1 {
			q = "UPDATE distribute_task_lock SET owner_token = 'someone else' WHERE task_name = ?"
		}
		if _, err := admin.ExecContext(ctx, q, fmt.Sprint(prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range lost {
		select {
		case <-locks[i].Done():
			if !errors.Is(locks[i].Err(), locker.ErrLost) {
				t.Errorf("lock %d: Err %v; want ErrLost", i, locks[i].Err())
			}
		case <-ctx.Done():
			t.Fatalf("lock %d changed behind the Locker's back was never reported lost", i)
		}
	}
	time.Sleep(2 * ttl)
	var starved error
	for i, lk := range locks {
		if lost[i] || lk.Err() == nil {
			continue
		}
		if s := rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal); s != nil {
			starved = s
			continue
		}
		t.Errorf("lock %d lost: %v; batch renewal must keep the untouched locks", i, lk.Err())
	}
	if t.Failed() {
		return nil
	}
	return starved
}

// TestWakeUp: a waiter whose polling would not retry for an hour is woken by
// the holder's release through the named lock.
func TestWakeUp(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	holder := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(30*time.Second))
	waiter := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(30*time.Second), locker.WithBackoff(locker.ConstantBackoff(time.Hour)))
	ctx := ctxFor(t, 20*time.Second)
	for i := range 5 {
		lk, err := holder.Lock(ctx, "wake")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			wl, err := waiter.Lock(ctx, "wake")
			if err == nil {
				err = wl.Unlock(ctx)
			}
			got <- err
		}()
		time.Sleep(time.Duration(i*20) * time.Millisecond) // before and after the holder takes its named lock
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: the waiter was not woken by the release (30 s TTL, 1 h backoff): %v", i, err)
		}
	}
}

// TestNamedLockFollowsTheRow: the holder's Locker holds the key's named lock
// while it holds the row (from a few milliseconds after acquiring), and
// frees it on Unlock and when the lock is lost.
func TestNamedLockFollowsTheRow(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	_, admin := openGorm(t, dsnConfig(t, dsn, ""))
	ctx := ctxFor(t, 30*time.Second)
	var database string
	if err := admin.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	used := func(key string) bool {
		var id sql.NullInt64
		if err := admin.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", mysql.LockName(database, mysql.DefaultTable, key)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id.Valid
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("never: %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	l := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(time.Second))
	lk, err := l.Lock(ctx, "named")
	if err != nil {
		t.Fatal(err)
	}
	eventually("the holder takes the named lock", func() bool { return used("named") })
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	eventually("Unlock frees the named lock", func() bool { return !used("named") })

	// Lost behind the Locker's back: the named lock follows.
	lk, err = l.Lock(ctx, "named")
	if err != nil {
		t.Fatal(err)
	}
	eventually("the holder takes the named lock again", func() bool { return used("named") })
	if _, err := admin.ExecContext(ctx, "DELETE FROM distribute_task_lock WHERE task_name = 'named'"); err != nil {
		t.Fatal(err)
	}
	<-lk.Done()
	eventually("a lost lock frees the named lock", func() bool { return !used("named") })
}

// TestSmallPool: with a pool of two connections there is no room for
// blocking waits; waiters poll, and nothing deadlocks.
func TestSmallPool(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	gdb, sqlDB := openGorm(t, dsnConfig(t, dsn, ""))
	sqlDB.SetMaxOpenConns(2)
	l, err := mysql.New(gdb, locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	other := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(2*time.Second))
	ctx := ctxFor(t, 60*time.Second)
	var wg sync.WaitGroup
	var count atomic.Int32
	for g := range 6 {
		wg.Go(func() {
			for i := range 10 {
				lo := l
				if g%2 == 0 {
					lo = other
				}
				if err := locker.Do(ctx, lo, fmt.Sprint("k", i%3), func(context.Context) error {
					count.Add(1)
					return nil
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if count.Load() != 60 {
		t.Errorf("%d runs; want 60", count.Load())
	}
}
