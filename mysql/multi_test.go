package mysql_test

import (
	"crypto/rand"
	"errors"
	"net/url"
	"strings"
	"testing"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/golocker/locker"
	"github.com/golocker/locker/mysql"
)

// TestMultiTokensAheadOfTheClock checks that the keys of a LockMulti still
// get tokens above their rows' versions when a version is ahead of the
// database clock, where the one-statement take (a token from the clock)
// must refuse.
func TestMultiTokensAheadOfTheClock(t *testing.T) {
	_, ctx := sharedLocker(t, mysql.Config{})
	prefix := t.Name() + "-" + rand.Text()[:8] + "/"
	db := openDB(t, exampleDSN)
	l, err := mysql.New(db, locker.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	sqlDB, _ := db.DB()
	lk, err := l.Lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ahead := lk.Token() + 1_000_000_000_000 // about 11 days of µs
	res, err := sqlDB.ExecContext(ctx, "UPDATE "+mysql.DefaultTable+" SET version = ? WHERE task_name = ? AND version = ?", ahead, prefix+"b", lk.Token())
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("move the version ahead: %d rows, %v", n, err)
	}
	m, err := locker.TryLockMulti(ctx, l, []string{"a", "b", "c"})
	if err != nil {
		t.Fatalf("TryLockMulti on free keys: %v", err)
	}
	defer m.Unlock(ctx)
	if got := m.Token("b"); got <= ahead {
		t.Errorf("a key's token must exceed every token its row handed out: got %d after %d", got, ahead)
	}
}

// TestMultiRefusesWithoutStrictMode checks that the one-statement take
// refuses a held key, and takes none of the others, on a session whose
// sql_mode turns errors on values into warnings.
func TestMultiRefusesWithoutStrictMode(t *testing.T) {
	u := exampleDSN + "&sql_mode=" + url.QueryEscape("''")
	if !strings.Contains(exampleDSN, "?") {
		u = exampleDSN + "?sql_mode=" + url.QueryEscape("''")
	}
	var mode string
	if err := openDB(t, u).Raw("SELECT @@SESSION.sql_mode").Scan(&mode).Error; err != nil || mode != "" {
		t.Fatalf("sql_mode %q (%v), want none", mode, err)
	}
	prefix := t.Name() + "-" + rand.Text()[:8] + "/"
	var lockers []locker.Locker
	for range 2 {
		l, err := mysql.New(openDB(t, u), locker.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		lockers = append(lockers, l)
	}
	_, ctx := sharedLocker(t, mysql.Config{})
	held, err := lockers[0].Lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	if m, err := locker.TryLockMulti(ctx, lockers[1], []string{"a", "b", "c"}); !errors.Is(err, locker.ErrNotAcquired) {
		if err == nil {
			m.Unlock(ctx)
		}
		t.Fatalf("TryLockMulti with a key held: got %v, want ErrNotAcquired", err)
	}
	for _, k := range []string{"a", "c"} {
		st, err := locker.Inspect(ctx, lockers[0], k)
		if err != nil {
			t.Fatal(err)
		}
		if st.Held {
			t.Errorf("a refused TryLockMulti must take none of its keys: %q is held", k)
		}
	}
	if st, err := locker.Inspect(ctx, lockers[0], "b"); err != nil || st.Token != held.Token() {
		t.Errorf("the held key must keep its holder: token %d, want %d (%v)", st.Token, held.Token(), err)
	}
}

// openDB opens a GORM handle on dsn, closed at the end of the test.
func openDB(t testing.TB, dsn string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(gormmysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}
