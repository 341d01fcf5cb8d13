package mysql_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
)

// TestPurgeKeepsTokensIncreasing: Purge deletes only rows idle for the
// given time and not held (held and kept rows stay), and a key whose row was
// purged hands out higher fencing tokens than before when it is taken
// again.
func TestPurgeKeepsTokensIncreasing(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	gdb, sqlDB := openGorm(t, dsnConfig(t, dsn, ""))
	ctx := ctxFor(t, 60*time.Second)
	const ttl = 30 * time.Second
	l := newLocker(t, dsn, mysql.Config{}, locker.WithTTL(ttl))

	var before uint64
	for range 50 {
		lk, err := l.TryLock(ctx, "old")
		if err != nil {
			t.Fatal(err)
		}
		before = lk.Token()
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := l.TryLock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	kept, err := l.TryLock(ctx, "kept", locker.MinHold(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := kept.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	idle := mysql.MinPurgeIdle
	time.Sleep(idle + 200*time.Millisecond)
	fresh, err := l.TryLock(ctx, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// "held" is renewed every TTL/3 (10 s): its update_time is as old as
	// "old"'s, and only its claim keeps it.
	n, err := mysql.Purge(ctx, gdb, "", idle)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("Purge deleted %d rows; want 1 (old; held, kept and fresh stay)", n)
	}
	rows, err := sqlDB.QueryContext(ctx, "SELECT task_name FROM "+mysql.DefaultTable+" ORDER BY task_name")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{"fresh", "held", "kept"}) {
		t.Errorf("rows after Purge: %q; want fresh, held and kept", left)
	}
	lk, err := l.TryLock(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(ctx)
	t.Logf("token of the purged key: %d before the purge, %d after", before, lk.Token())
	if lk.Token() <= before {
		t.Errorf("token after Purge and a new acquisition = %d; want above %d, the last before the purge", lk.Token(), before)
	}
}

func TestPurgeRefusesBadArguments(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	gdb, _ := openGorm(t, dsnConfig(t, dsn, ""))
	ctx := t.Context()
	for _, c := range []struct {
		table string
		idle  time.Duration
	}{
		{"", 0},
		{"", time.Millisecond},
		{"bad-name", time.Hour},
	} {
		if _, err := mysql.Purge(ctx, gdb, c.table, c.idle); !errors.Is(err, locker.ErrInvalidOption) {
			t.Errorf("Purge(%q, %v) = %v; want ErrInvalidOption", c.table, c.idle, err)
		}
	}
	if _, err := mysql.Purge(ctx, nil, "", time.Hour); !errors.Is(err, locker.ErrInvalidOption) {
		t.Errorf("Purge with a nil db = %v; want ErrInvalidOption", err)
	}
}
