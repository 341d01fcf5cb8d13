package mysql

import (
	"crypto/rand"
	"log/slog"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// TestSharedTokensAcrossHints checks, with and without the take of a key
// marked SHARED in its row (MariaDB, and the transaction alone as on
// MySQL), that tokens increase across shared holds of a key left marked by
// the previous hold, a plain lock that frees the key, and shared holds
// after it; and that a released hold leaves the key's row marked SHARED
// when it lived in the table of shared holds, and frees it when it lived
// in the row.
func TestSharedTokensAcrossHints(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "MarkedInRow", false: "Transaction"}[fast], func(t *testing.T) {
			db, ctx := openTestDB(t)
			d := newDriver(db, Config{PollOnly: true, Table: DefaultTable}, 0)
			if err := d.Configure(ctx, driver.Config{TTL: 30 * time.Second, Logger: slog.New(slog.DiscardHandler), Backoff: func(int) time.Duration { return 10 * time.Millisecond }}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			if fast && !d.mariaDB {
				t.Skip("the one-statement take runs on MariaDB only")
			}
			d.mariaDB = fast
			k := t.Name() + "-" + rand.Text()[:8]
			req := func() driver.Request { return driver.Request{Key: k, Owner: rand.Text(), TTL: 30 * time.Second} }
			var last uint64
			step := func(what string) func(driver.Grant, error) driver.Grant {
				return func(g driver.Grant, err error) driver.Grant {
					t.Helper()
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					if g.Token <= last {
						t.Fatalf("%s: token %d, not above the earlier %d", what, g.Token, last)
					}
					last = g.Token
					return g
				}
			}
			status := func() string {
				var s string
				if err := db.QueryRowContext(ctx, "SELECT task_status FROM "+d.sql.table+" WHERE task_name = ?", k).Scan(&s); err != nil {
					t.Fatal(err)
				}
				return s
			}
			permit := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1}
			for i := range 3 {
				g := step("a permit")(d.TryAcquireShared(ctx, req(), permit))
				if err := d.Release(ctx, driver.Lease{Key: k, State: g.State}); err != nil {
					t.Fatal(err)
				}
				want := sharedStatus // the hint
				if g.State.(*shareState).inRow {
					want = "FINISH"
				}
				if s := status(); s != want {
					t.Fatalf("after permit %d left, the key's row is %s, want %s", i, s, want)
				}
				if inRow := g.State.(*shareState).inRow; inRow != (fast && i > 0) {
					t.Fatalf("permit %d: in the key's row %v, want %v", i, inRow, fast && i > 0)
				}
			}
			g := step("a plain lock after the permits")(d.TryAcquire(ctx, req()))
			if err := d.Release(ctx, driver.Lease{Key: k, State: g.State}); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				g := step("a read hold after the plain lock")(d.TryAcquireShared(ctx, req(), driver.Share{Mode: driver.Read, Weight: 1}))
				if err := d.Release(ctx, driver.Lease{Key: k, State: g.State}); err != nil {
					t.Fatal(err)
				}
			}
			step("a write hold after the read holds")(d.TryAcquireShared(ctx, req(), driver.Share{Mode: driver.Write, Weight: 1}))
		})
	}
}
