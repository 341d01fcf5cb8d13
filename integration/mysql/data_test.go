package mysql_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
)

// TestDataColumnMigration: a lock table made before lock_data existed
// makes New with SkipMigration fail naming the ALTER TABLE to run, and
// New without it add the column, after which data round-trips. A table
// of another shape is left alone.
func TestDataColumnMigration(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	gdb, admin := openGorm(t, dsnConfig(t, dsn, ""))
	ctx := ctxFor(t, 60*time.Second)
	for _, q := range []string{
		mysql.CreateTableSQL("old_locks"),
		"ALTER TABLE `old_locks` DROP COLUMN `lock_data`",
		"CREATE TABLE other_shape (task_name VARCHAR(255) NOT NULL PRIMARY KEY, owner_label VARCHAR(255) NOT NULL)",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_, err := mysql.Config{Table: "old_locks", SkipMigration: true}.New(gdb)
	if err == nil || !strings.Contains(err.Error(), mysql.AddDataColumnSQL("old_locks")) {
		t.Errorf("SkipMigration on a table without lock_data: %v; want an error naming %s", err, mysql.AddDataColumnSQL("old_locks"))
	}
	if _, err := (mysql.Config{Table: "other_shape"}).New(gdb); err == nil {
		t.Error("New on a table of another shape succeeded")
	}
	var n int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'other_shape' AND COLUMN_NAME = 'lock_data'").Scan(&n); err != nil || n != 0 {
		t.Errorf("lock_data columns in the table of another shape: %d, %v; want 0 (left alone)", n, err)
	}

	l, err := mysql.Config{Table: "old_locks"}.New(gdb, locker.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("New on a table without lock_data: %v", err)
	}
	defer l.Close()
	lk, err := l.TryLock(ctx, "k", locker.WithData([]byte("10.0.0.1:8080")))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	if err := locker.SetData(ctx, lk, []byte("10.0.0.2:8080")); err != nil {
		t.Fatal(err)
	}
	st, err := locker.Inspect(ctx, l, "k")
	if err != nil || st.Token != lk.Token() || !bytes.Equal(st.Data, []byte("10.0.0.2:8080")) {
		t.Errorf("Inspect = token %d, data %q, %v; want token %d, data %q", st.Token, st.Data, err, lk.Token(), "10.0.0.2:8080")
	}
}
