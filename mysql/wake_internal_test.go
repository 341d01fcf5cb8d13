package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// TestSharedChangesWakeWaiters checks that a change that may let a waiter
// of a shared hold in wakes the waiters of the key in another driver: a
// SetLimit (driver.Limiter's contract), and the release of a holder that
// does not have the key's named lock. The waits for a wake-up last a
// minute here, so a waiter that is not woken gets no signal within the
// test's bound.
func TestSharedChangesWakeWaiters(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change runs in a driver of its own, after the waiter
		// subscribed; second is the hold without the named lock.
		change func(ctx context.Context, d *sqlDriver, k string, second driver.Grant) error
	}{
		{"SetLimit", func(ctx context.Context, d *sqlDriver, k string, _ driver.Grant) error {
			return d.SetLimit(ctx, k, 3)
		}},
		{"Release", func(ctx context.Context, d *sqlDriver, k string, second driver.Grant) error {
			return d.Release(ctx, driver.Lease{Key: k, State: second.State})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, ctx := openTestDB(t)
			holder, other, waiter := wakeDriver(t, db), wakeDriver(t, db), wakeDriver(t, db)
			k, req, _ := freeKey(t, holder)
			permits := driver.Share{Mode: driver.Permits, Limit: 2, Weight: 1, Queue: true}
			if _, err := holder.TryAcquireShared(ctx, req(), permits); err != nil {
				t.Fatal(err)
			}
			name := holder.notify.name(k)
			awaitCount(ctx, t, db, "SELECT IS_USED_LOCK('"+name+"') IS NOT NULL")
			second, err := other.TryAcquireShared(ctx, req(), permits)
			if err != nil {
				t.Fatal(err)
			}
			_, err = waiter.TryAcquireShared(ctx, req(), permits)
			var res *driver.Residue
			if !errors.As(err, &res) {
				t.Fatalf("a third permit of two must wait in line, got %v", err)
			}
			defer func() { _ = res.Cleanup(context.WithoutCancel(ctx)) }()
			ch, cancel, err := notifyingDriver{waiter}.Subscribe(ctx, k)
			if err != nil || ch == nil {
				t.Fatalf("Subscribe after a refusal must watch the key: channel %v, error %v", ch, err)
			}
			defer cancel()
			// The waiter's wait for the name is under way.
			start := fmt.Sprintf(ringSQL[:strings.LastIndex(ringSQL, "%.3")], name)
			awaitCount(ctx, t, db, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE LOCATE('"+
				strings.ReplaceAll(start, "'", "''")+"', INFO) = 1")
			for len(ch) > 0 {
				<-ch
			}
			if err := tc.change(ctx, other, k, second); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatalf("%s must wake the key's waiters in other Lockers, which got no signal", tc.name)
			}
		})
	}
}

// wakeDriver returns a driver with wake-ups whose waits for a shared
// hold's wake-up last a minute unless woken.
func wakeDriver(t *testing.T, db *sql.DB) *sqlDriver {
	t.Helper()
	d := newDriver(db, Config{Table: DefaultTable}, 0)
	if err := d.Configure(t.Context(), driver.Config{TTL: 30 * time.Second, Logger: slog.New(slog.DiscardHandler), Label: rand.Text()[:6],
		Backoff: func(int) time.Duration { return time.Minute }}); err != nil {
		t.Fatal(err)
	}
	if d.notify == nil {
		t.Fatal("the driver must have wake-ups")
	}
	d.notify.ringMax = time.Minute
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// awaitCount waits until query, a count, returns more than 0.
func awaitCount(ctx context.Context, t *testing.T, db *sql.DB, query string) {
	t.Helper()
	awaitCountBefore(ctx, t, db, query, nil)
}

// awaitCountBefore is awaitCount that fails when a call's error arrives on
// done first (a nil done never does).
func awaitCountBefore(ctx context.Context, t *testing.T, db *sql.DB, query string, done <-chan error) {
	t.Helper()
	for {
		var n int
		if err := db.QueryRowContext(ctx, query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("%s: still 0 when the call returned (%v)", query, err)
		case <-ctx.Done():
			t.Fatalf("%s: still 0 when the test's time ran out", query)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
