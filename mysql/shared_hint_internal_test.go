package mysql

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// TestSharedTokensAcrossHints checks that tokens increase across shared
// holds in the key's row, holds in the table of shared holds that leave the
// key's row marked SHARED, a plain lock that frees the key, and shared
// holds after it; that a hold released from the key's row frees it, and
// one released from the table of shared holds leaves the mark; and that
// the first hold of a marked key with no live hold goes back to the row.
func TestSharedTokensAcrossHints(t *testing.T) {
	db, ctx := openTestDB(t)
	d := soleDriver(t, db)
	k := t.Name() + "-" + rand.Text()[:8]
	req := func() driver.Request { return driver.Request{Key: k, Owner: rand.Text(), TTL: 30 * time.Second} }
	var last uint64
	step := func(what string, inRow bool) func(driver.Grant, error) driver.Grant {
		return func(g driver.Grant, err error) driver.Grant {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if g.Token <= last {
				t.Fatalf("%s: token %d, not above the earlier %d", what, g.Token, last)
			}
			if s, ok := g.State.(*shareState); ok && s.inRow != inRow {
				t.Fatalf("%s: in the key's row %v, want %v", what, s.inRow, inRow)
			}
			last = g.Token
			return g
		}
	}
	release := func(g driver.Grant, want string) {
		t.Helper()
		if err := d.Release(ctx, driver.Lease{Key: k, State: g.State}); err != nil {
			t.Fatal(err)
		}
		var s string
		if err := db.QueryRowContext(ctx, "SELECT task_status FROM "+d.sql.table+" WHERE task_name = ?", k).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s != want {
			t.Fatalf("after a release the key's row is %s, want %s", s, want)
		}
	}
	permit := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1}
	for range 2 {
		release(step("a permit of a free key", true)(d.TryAcquireShared(ctx, req(), permit)), "FINISH")
	}
	first := step("a first permit", true)(d.TryAcquireShared(ctx, req(), permit))
	second := step("a second permit", false)(d.TryAcquireShared(ctx, req(), permit))
	release(first, sharedStatus)
	release(second, sharedStatus) // the hint
	release(step("a permit of a marked key", true)(d.TryAcquireShared(ctx, req(), permit)), "FINISH")
	g := step("a plain lock after the permits", false)(d.TryAcquire(ctx, req()))
	release(g, "FINISH")
	for range 2 {
		release(step("a read hold after the plain lock", true)(d.TryAcquireShared(ctx, req(), driver.Share{Mode: driver.Read, Weight: 1})), "FINISH")
	}
	step("a write hold after the read holds", true)(d.TryAcquireShared(ctx, req(), driver.Share{Mode: driver.Write, Weight: 1}))
}
