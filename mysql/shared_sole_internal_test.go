package mysql

import (
	"crypto/rand"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// TestSoleHoldMoves checks a key's first shared hold, which lives in the
// key's row: a second holder moves it into the table of shared holds, and
// it still renews, shows in Inspect, counts against the limit and
// releases there; the key's next first hold takes the row again, and
// tokens increase throughout.
func TestSoleHoldMoves(t *testing.T) {
	db, ctx := openTestDB(t)
	d := soleDriver(t, db)
	k, req, last := freeKey(t, d)
	ttl := 30 * time.Second
	permit := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1}
	take := func(what string, inRow bool) driver.Grant {
		t.Helper()
		g, err := d.TryAcquireShared(ctx, req(), permit)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if g.Token <= last {
			t.Fatalf("%s: token %d, not above the earlier %d", what, g.Token, last)
		}
		if got := g.State.(*shareState).inRow; got != inRow {
			t.Fatalf("%s: in the key's row %v, want %v", what, got, inRow)
		}
		last = g.Token
		return g
	}
	inspect := func(holders int) {
		t.Helper()
		st, err := d.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Held || len(st.Holders) != holders || st.Limit != permit.Limit {
			t.Fatalf("Inspect: held %v, %d holders, limit %d; want %d holders of a semaphore of %d", st.Held, len(st.Holders), st.Limit, holders, permit.Limit)
		}
	}
	first := take("the first permit", true)
	inspect(1)
	second := take("the second permit", false)
	inspect(2)
	if !first.State.(*shareState).inRow || first.State.(*shareState).moved.Load() {
		t.Fatal("the first permit's state changed before it learned of the move")
	}
	leases := []driver.Lease{{Key: k, TTL: ttl, State: first.State}, {Key: k, TTL: ttl, State: second.State}}
	for round := range 2 {
		validity, errs, err := d.RenewBatch(ctx, leases)
		if err != nil {
			t.Fatal(err)
		}
		for i := range leases {
			if errs[i] != nil || validity[i] <= 0 {
				t.Fatalf("renewal %d of permit %d after the first moved out of the key's row: validity %v, %v", round, i+1, validity[i], errs[i])
			}
		}
	}
	if _, err := d.TryAcquireShared(ctx, req(), permit); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("a third permit of a semaphore of 2 with the first moved: %v, want ErrHeld", err)
	}
	for i, g := range []driver.Grant{first, second} {
		if err := d.Release(ctx, driver.Lease{Key: k, State: g.State}); err != nil {
			t.Fatalf("release of permit %d: %v", i+1, err)
		}
	}
	if st, err := d.Inspect(ctx, k); err != nil || st.Held {
		t.Fatalf("Inspect after both left: %+v, %v", st, err)
	}
	again := take("a permit after both left", true)
	if err := d.Release(ctx, driver.Lease{Key: k, State: again.State}); err != nil {
		t.Fatal(err)
	}
	g, err := d.TryAcquire(ctx, req())
	if err != nil {
		t.Fatalf("a plain lock after the permits: %v", err)
	}
	if g.Token <= last {
		t.Fatalf("a plain lock after the permits: token %d, not above %d", g.Token, last)
	}
}

// TestSoleHoldRenewsBesideAttempt checks that a shared hold in its key's
// row renews while another holder's attempt on the key is in the middle
// of its transaction (as one cut off from its client is, until the server
// ends its session): the attempt never locks a row held that way.
func TestSoleHoldRenewsBesideAttempt(t *testing.T) {
	db, ctx := openTestDB(t)
	d := soleDriver(t, db)
	k, req, _ := freeKey(t, d)
	ttl := 30 * time.Second
	permit := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1}
	p, err := d.TryAcquireShared(ctx, req(), permit)
	if err != nil {
		t.Fatal(err)
	}
	if !p.State.(*shareState).inRow {
		t.Fatal("the first permit of a free key must live in the key's row")
	}
	locked, renewed, ended := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	// Set when the attempt's transaction was over (the server ends its
	// session after txIdle) before the renewal returned.
	stalled := false
	go func() {
		ended <- d.inTx(ctx, txIdle(time.Minute), func(tx *sql.Tx) error {
			_, _, err := d.lockKey(ctx, tx, k)
			locked <- err
			select { // the attempt stalls here, its transaction open
			case <-renewed:
				var one int
				stalled = tx.QueryRowContext(ctx, "SELECT 1").Scan(&one) != nil
			case <-time.After(20 * time.Second):
				stalled = true
			}
			return errors.New("rolled back")
		})
	}()
	if err := <-locked; !errors.Is(err, errSole) {
		t.Fatalf("an attempt's lock of a key's row held by a shared hold in it: %v, want errSole", err)
	}
	validity, errs, err := d.RenewBatch(ctx, []driver.Lease{{Key: k, TTL: ttl, State: p.State}})
	close(renewed)
	if err != nil || errs[0] != nil || validity[0] <= 0 {
		t.Fatalf("a hold in its key's row must renew while an attempt's transaction is open: validity %v, %v, %v", validity[0], errs[0], err)
	}
	<-ended
	if stalled {
		t.Fatal("the renewal returned only after the attempt's transaction ended: it waited for the key's row")
	}
	if err := d.Release(ctx, driver.Lease{Key: k, State: p.State}); err != nil {
		t.Fatal(err)
	}
}

func soleDriver(t *testing.T, db *sql.DB) *sqlDriver {
	t.Helper()
	return pollDriver(t, t.Context(), db, DefaultTable, 30*time.Second)
}

// freeKey returns a key of the test's own whose row exists and is free,
// requests for it with a TTL of 30 s, and its latest token.
func freeKey(t *testing.T, d *sqlDriver) (string, func() driver.Request, uint64) {
	t.Helper()
	k := t.Name() + "-" + rand.Text()[:8]
	req := func() driver.Request { return driver.Request{Key: k, Owner: rand.Text(), TTL: 30 * time.Second} }
	g, err := d.TryAcquire(t.Context(), req())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Release(t.Context(), driver.Lease{Key: k, State: g.State}); err != nil {
		t.Fatal(err)
	}
	return k, req, g.Token
}

// TestMovedHoldLeavesBesideAttempt checks that a hold moved out of its
// key's row, which has not learned it yet (no renewal since the move),
// releases or keeps while an attempt's transaction holds the key's row (as
// one cut off from its client does until the server ends its session):
// it does not wait for that transaction.
func TestMovedHoldLeavesBesideAttempt(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(map[bool]string{false: "Release", true: "Keep"}[keep], func(t *testing.T) {
			db, ctx := openTestDB(t)
			d := soleDriver(t, db)
			if !d.mariaDB {
				t.Skip("a statement that does not wait for a row lock needs MariaDB's SET STATEMENT")
			}
			k, req, _ := freeKey(t, d)
			permit := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1}
			first, err := d.TryAcquireShared(ctx, req(), permit)
			if err != nil {
				t.Fatal(err)
			}
			second, err := d.TryAcquireShared(ctx, req(), permit) // moves the first out
			if err != nil {
				t.Fatal(err)
			}
			if s := first.State.(*shareState); !s.rowHeld() {
				t.Fatal("the first permit learned of its move before it renewed")
			}
			locked, left, ended := make(chan error, 1), make(chan struct{}), make(chan error, 1)
			// Set when the attempt's transaction was over (the server ends
			// its session after txIdle) before the release returned.
			stalled := false
			go func() {
				ended <- d.inTx(ctx, txIdle(time.Minute), func(tx *sql.Tx) error {
					_, _, err := d.lockKey(ctx, tx, k)
					locked <- err
					select { // the attempt stalls here, the key's row locked
					case <-left:
						var one int
						stalled = tx.QueryRowContext(ctx, "SELECT 1").Scan(&one) != nil
					case <-time.After(20 * time.Second):
						stalled = true
					}
					return errors.New("rolled back")
				})
			}()
			if err := <-locked; err != nil {
				t.Fatalf("an attempt's lock of a key's row marked SHARED: %v", err)
			}
			lease := driver.Lease{Key: k, TTL: 30 * time.Second, State: first.State}
			if keep {
				err = d.Keep(ctx, lease, time.Second)
			} else {
				err = d.Release(ctx, lease)
			}
			close(left)
			<-ended
			if err != nil {
				t.Fatalf("a moved hold's release or keep beside an attempt: %v", err)
			}
			if stalled {
				t.Fatal("the moved hold's release or keep returned only after the attempt's transaction ended: it waited for the key's row")
			}
			if err := d.Release(ctx, driver.Lease{Key: k, State: second.State}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
