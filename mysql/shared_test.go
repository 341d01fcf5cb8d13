package mysql_test

import (
	"context"
	"crypto/rand"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/mysql"
)

// sharedLocker returns a Locker on the test database with a fresh prefix.
func sharedLocker(t *testing.T, c mysql.Config) (locker.Locker, context.Context) {
	t.Helper()
	db := openExampleDB()
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	l, err := c.New(db, locker.WithPrefix(t.Name()+"-"+rand.Text()[:8]+"/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return l, ctx
}

// TestSharedConflicts checks that a key is one kind of lock at a time: a
// semaphore with two limits, a semaphore and a read-write lock, a shared
// hold and a plain lock all fail with ErrInvalidOption naming both sides.
func TestSharedConflicts(t *testing.T) {
	l, ctx := sharedLocker(t, mysql.Config{})
	four, _ := locker.NewSemaphore(l, "k", 4)
	five, _ := locker.NewSemaphore(l, "k", 5)
	rw, _ := locker.NewRWMutex(l, "k")
	p, err := four.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"limit 5": func() error { _, err := five.TryAcquire(ctx); return err },
		"rwmutex": func() error { _, err := rw.RLock(ctx); return err },
		"lock":    func() error { _, err := l.Lock(ctx, "k"); return err },
	} {
		err := call()
		if !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("%s on a semaphore of 4: got %v, want ErrInvalidOption", name, err)
		} else if name != "lock" && !strings.Contains(err.Error(), "4") {
			t.Errorf("%s on a semaphore of 4: got %v, want an error naming the limit 4", name, err)
		}
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("the key must be free for a plain lock once the last permit is back: %v", err)
	}
	if _, err := five.TryAcquire(ctx); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("TryAcquire on a plain lock's key: got %v, want ErrInvalidOption", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := five.TryAcquire(ctx); err != nil {
		t.Errorf("a semaphore on a key whose plain lock was released: %v", err)
	} else if p.Token() <= lk.Token() {
		t.Errorf("a permit after a lock got token %d, not above the lock's %d", p.Token(), lk.Token())
	}
}

// TestSharedInspectBreakKeep checks Inspect of a semaphore's key (limit,
// holders, waiters), ForceUnlock of its holders, and MinHold of a permit.
func TestSharedInspectBreakKeep(t *testing.T) {
	l, ctx := sharedLocker(t, mysql.Config{})
	s, _ := locker.NewSemaphore(l, "s", 4)
	p1, err := s.TryAcquireN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.TryAcquireN(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	st, err := locker.Inspect(ctx, l, "s")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Limit != 4 || len(st.Holders) != 2 || st.Token != p2.Token() {
		t.Fatalf("Inspect of a semaphore of 4 with two holders: %+v", st)
	}
	if st.Holders[0].Weight != 1 || st.Holders[1].Weight != 3 || st.Holders[0].Token != p1.Token() {
		t.Errorf("Inspect must list the holders oldest first with their weights: %+v", st.Holders)
	}
	if err := locker.ForceUnlock(ctx, l, "s"); err != nil {
		t.Fatalf("ForceUnlock of a semaphore's key: %v", err)
	}
	if st, err := locker.Inspect(ctx, l, "s"); err != nil || st.Held || len(st.Holders) != 0 {
		t.Fatalf("Inspect after ForceUnlock: %+v, %v; want no holder", st, err)
	}
	if !errors.Is(locker.ForceUnlock(ctx, l, "s"), locker.ErrNotHeld) {
		t.Error("ForceUnlock of a semaphore without holders must fail with ErrNotHeld")
	}
	p, err := s.TryAcquireN(ctx, 4, locker.MinHold(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("a permit given up with a MinHold left must stay taken: got %v", err)
	}
}

// TestGuardRefusesSharedHolds checks that Guard refuses a permit with an
// error naming the problem.
func TestGuardRefusesSharedHolds(t *testing.T) {
	l, ctx := sharedLocker(t, mysql.Config{})
	s, _ := locker.NewSemaphore(l, "s", 2)
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	db := openExampleDB()
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return mysql.Guard(tx, p) })
	if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "permit") {
		t.Errorf("Guard of a permit: got %v, want ErrInvalidOption naming the permit", err)
	}
}

// TestSharedLongTableName checks that a lock table whose name leaves no room
// for the table of shared holds still serves plain locks, and that shared
// holds fail with an error naming the problem.
func TestSharedLongTableName(t *testing.T) {
	l, ctx := sharedLocker(t, mysql.Config{Table: strings.Repeat("t", 60)})
	lk, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	_ = lk.Unlock(ctx)
	s, _ := locker.NewSemaphore(l, "s", 2)
	if _, err := s.TryAcquire(ctx); err == nil || !strings.Contains(err.Error(), "Config.Table") {
		t.Errorf("a semaphore on a lock table with a 60-byte name: got %v, want an error naming Config.Table", err)
	}
}

// TestPurgeShared checks that Purge deletes the rows of shared holds that
// ended idle ago, which nothing else deletes once their key is unused, and
// frees the key's row, so that a later purge can delete it.
func TestPurgeShared(t *testing.T) {
	l, ctx := sharedLocker(t, mysql.Config{})
	s, _ := locker.NewSemaphore(l, "s", 2)
	if _, err := s.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	db := openExampleDB()
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	like := t.Name() + "-%"
	// The permit ended two seconds ago (a crashed holder).
	if err := db.Exec("UPDATE "+mysql.DefaultTable+"_shared SET lock_until = TIMESTAMPADD(SECOND, -2, UTC_TIMESTAMP(6)) WHERE task_name LIKE ?", like).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := mysql.Purge(ctx, db, "", time.Second); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := db.Raw("SELECT COUNT(*) FROM "+mysql.DefaultTable+"_shared WHERE task_name LIKE ?", like).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("Purge left %d rows of shared holds that ended two seconds ago", n)
	}
	var marked int64
	if err := db.Raw("SELECT COUNT(*) FROM "+mysql.DefaultTable+" WHERE task_name LIKE ? AND task_status = 'SHARED'", like).Scan(&marked).Error; err != nil {
		t.Fatal(err)
	}
	if marked != 0 {
		t.Errorf("Purge left the key's row marked as held by shared holds, none of which is left")
	}
}

// BenchmarkShared measures an uncontended permit (TryAcquire+Unlock of a
// semaphore) and read hold beside a plain TryLock+Unlock, on the test
// database (run with -bench=Shared).
func BenchmarkShared(b *testing.B) {
	db := openExampleDB()
	sqlDB, _ := db.DB()
	b.Cleanup(func() { _ = sqlDB.Close() })
	l, err := mysql.New(db, locker.WithPrefix("bench-"+rand.Text()[:8]+"/"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := b.Context()
	s, _ := locker.NewSemaphore(l, "s", 4)
	rw, _ := locker.NewRWMutex(l, "rw")
	for name, take := range map[string]func() (locker.Lock, error){
		"Lock":     func() (locker.Lock, error) { return l.TryLock(ctx, "k") },
		"Permit":   func() (locker.Lock, error) { return s.TryAcquire(ctx) },
		"ReadHold": func() (locker.Lock, error) { return rw.TryRLock(ctx) },
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				lk, err := take()
				if err != nil {
					b.Fatal(err)
				}
				if err := lk.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSemaphoreLine checks that a heavy request waiting in line is not
// overtaken by a later light one, and that Inspect counts it as a waiter.
func TestSemaphoreLine(t *testing.T) {
	db := openExampleDB()
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	prefix := locker.WithPrefix(t.Name() + "-" + rand.Text()[:8] + "/")
	a, err := mysql.New(db, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := mysql.New(db, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sa, _ := locker.NewSemaphore(a, "w", 3)
	sb, _ := locker.NewSemaphore(b, "w", 3)
	p1, err := sa.TryAcquireN(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	heavy := make(chan error, 1)
	go func() {
		p, err := sb.AcquireN(ctx, 3)
		if err == nil {
			err = p.Unlock(ctx)
		}
		heavy <- err
	}()
	for {
		st, err := locker.Inspect(ctx, a, "w")
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiters == 1 {
			break
		}
		if !driver.Sleep(ctx, 10*time.Millisecond) {
			t.Fatal("Inspect never counted the request for 3 permits as a waiter")
		}
	}
	if p, err := sa.TryAcquire(ctx); err == nil {
		_ = p.Unlock(ctx)
		t.Error("a permit was granted past a waiting request for 3")
	}
	if err := p1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-heavy; err != nil {
		t.Fatalf("AcquireN(3) once the permits were back: %v", err)
	}
}

// TestSharedRenewalIgnoresKeyRow checks that holds in the table of shared
// holds renew, and leave, while another transaction holds their key's row
// (as an attempt cut off from its client does until the server ends its
// session): their renewals and releases must never wait for the key's
// row. Two holds of each key put both there. (No attempt locks a row that
// holds a hold: see TestSoleHoldRenewsBesideAttempt.)
func TestSharedRenewalIgnoresKeyRow(t *testing.T) {
	const ttl = 900 * time.Millisecond
	db := openExampleDB()
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	prefix := t.Name() + "-" + rand.Text()[:8] + "/"
	l, err := mysql.New(db, locker.WithPrefix(prefix), locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, _ := locker.NewSemaphore(l, "k", 2)
	rw, _ := locker.NewRWMutex(l, "rw")
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, key := range []string{"k", "rw"} {
		var status string
		if err := tx.QueryRowContext(ctx, "SELECT task_status FROM distribute_task_lock WHERE task_name = ? FOR UPDATE", prefix+key).Scan(&status); err != nil {
			t.Fatal(err)
		}
	}
	// Three TTLs with the keys' rows locked: a renewal that waits for
	// them loses the holds.
	select {
	case <-p.Done():
		t.Fatalf("a permit must stay held while another transaction holds its key's row: lost: %v", p.Err())
	case <-r.Done():
		t.Fatalf("a read hold must stay held while another transaction holds its key's row: lost: %v", r.Err())
	case <-time.After(3 * ttl):
	}
	for _, lk := range []locker.Lock{p, r, p2, r2} {
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := lk.Unlock(uctx)
		cancel()
		if err != nil {
			t.Errorf("Unlock of a shared hold must not wait for its key's row: %v", err)
		}
	}
}

// TestSharedCrashedHoldersFreeKey checks that plain locks, one key or
// several, take a key whose shared holders left without freeing it (here a
// permit given up with a MinHold, which nobody renews) once their holds
// expired, and are refused before.
func TestSharedCrashedHoldersFreeKey(t *testing.T) {
	l, ctx := sharedLocker(t, mysql.Config{})
	s, _ := locker.NewSemaphore(l, "k", 2)
	// The MinHold outlasts the two refused attempts below by far, however
	// loaded the machine: they must find the permit still kept.
	p, err := s.TryAcquire(ctx, locker.MinHold(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx, "k"); !errors.Is(err, locker.ErrInvalidOption) {
		t.Fatalf("TryLock of a key whose permit is kept by a MinHold: got %v, want ErrInvalidOption", err)
	}
	if _, err := locker.TryLockMulti(ctx, l, []string{"other", "k"}); !errors.Is(err, locker.ErrInvalidOption) {
		t.Fatalf("TryLockMulti of a key whose permit is kept by a MinHold: got %v, want ErrInvalidOption", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := locker.TryLockMulti(ctx, l, []string{"other", "k"})
		if err == nil {
			_ = m.Unlock(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TryLockMulti must get a key whose shared holds all expired: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		lk, err := l.TryLock(ctx, "k")
		if err == nil {
			if lk.Token() <= p.Token() {
				t.Errorf("a lock after a permit got token %d, not above the permit's %d", lk.Token(), p.Token())
			}
			_ = lk.Unlock(ctx)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a plain lock must get a key whose shared holds all expired: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSharedPurgeKeepsKey checks that Purge leaves the row of a key held
// by shared holds, however old its times (their renewals change only
// their own rows): a purged row would let a plain lock in beside them.
func TestSharedPurgeKeepsKey(t *testing.T) {
	db := openExampleDB()
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	prefix := t.Name() + "-" + rand.Text()[:8] + "/"
	l, err := mysql.New(db, locker.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, _ := locker.NewSemaphore(l, "k", 2)
	// Two permits: both in the table of shared holds, the key's row SHARED.
	for range 2 {
		p, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = p.Unlock(ctx) }()
	}
	if _, err := sqlDB.ExecContext(ctx, "UPDATE distribute_task_lock SET update_time = TIMESTAMPADD(HOUR, -2, UTC_TIMESTAMP(6)),"+
		" lock_until = TIMESTAMPADD(HOUR, -2, UTC_TIMESTAMP(6)) WHERE task_name = ?", prefix+"k"); err != nil {
		t.Fatal(err)
	}
	if _, err := mysql.Purge(ctx, db, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	if lk, err := l.TryLock(ctx, "k"); !errors.Is(err, locker.ErrInvalidOption) {
		if err == nil {
			_ = lk.Unlock(ctx)
		}
		t.Fatalf("TryLock of a key a permit holds, after Purge: got %v, want ErrInvalidOption", err)
	}
}

// TestListSharedKeys checks that List yields the keys shared holds hold,
// with their holders, and not a key whose holds all left, which stays
// marked as held by shared holds.
func TestListSharedKeys(t *testing.T) {
	l, ctx := sharedLocker(t, mysql.Config{})
	held, _ := locker.NewSemaphore(l, "held", 3)
	left, _ := locker.NewSemaphore(l, "left", 3)
	rw, _ := locker.NewRWMutex(l, "rw")
	for range 2 {
		p, err := held.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = p.Unlock(ctx) }()
	}
	r, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Unlock(ctx) }()
	p, err := left.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for ks, err := range locker.List(ctx, l, "") {
		if err != nil {
			t.Fatal(err)
		}
		got[ks.Key] = len(ks.Holders)
	}
	if want := map[string]int{"held": 2, "rw": 1}; !maps.Equal(got, want) {
		t.Errorf("List yielded keys and holders %v, want %v", got, want)
	}
}
