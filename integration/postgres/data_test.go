package postgres_test

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/postgres"
)

// TestDataColumnMigration: a lock table made before lock_data existed
// makes New with SkipMigration fail naming the ALTER TABLE to run, and
// New without it add the column, after which data round-trips. A table
// of another shape is left alone.
func TestDataColumnMigration(t *testing.T) {
	pool := openPool(t, testenv.Postgres(t).URL())
	ctx := t.Context()
	old, other := "old_locks_"+strings.ToLower(rand.Text()[:8]), "other_shape_"+strings.ToLower(rand.Text()[:8])
	for _, q := range []string{
		postgres.CreateTableSQL(old),
		`ALTER TABLE "` + old + `" DROP COLUMN lock_data`,
		`CREATE TABLE "` + other + `" (task_name text PRIMARY KEY, owner_label text NOT NULL)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_, err := postgres.NewWithConfig(pool, postgres.Config{Table: old, SkipMigration: true})
	if err == nil || !strings.Contains(err.Error(), postgres.AddDataColumnSQL(old)) {
		t.Errorf("SkipMigration on a table without lock_data: %v; want an error naming %s", err, postgres.AddDataColumnSQL(old))
	}
	if _, err := postgres.NewWithConfig(pool, postgres.Config{Table: other}); err == nil {
		t.Error("New on a table of another shape succeeded")
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 AND column_name = 'lock_data'", other).Scan(&n); err != nil || n != 0 {
		t.Errorf("lock_data columns in the table of another shape: %d, %v; want 0 (left alone)", n, err)
	}

	l, err := postgres.NewWithConfig(pool, postgres.Config{Table: old}, locker.WithTTL(5*time.Second))
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
