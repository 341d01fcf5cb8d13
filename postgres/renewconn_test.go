package postgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/golocker/locker"
	"github.com/golocker/locker/postgres"
)

// TestRenewalNeedsNoNewConnection: a Locker on a *sql.DB renews its locks
// on a connection it keeps, so a renewal does not open one. database/sql
// closes idle connections past MaxIdleConns (2 by default): a renewal
// after a burst of acquisitions opened one, and under load the connect
// outlasted the lock's validity (CI: TestConformanceSQLDB/Scale lost a
// lock to "failed to connect ... context deadline exceeded"). Here no
// connection stays idle, and new ones are refused once the lock is held.
func TestRenewalNeedsNoNewConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pc, err := pgx.ParseConfig(exampleURL)
	if err != nil {
		t.Fatal(err)
	}
	var refuse atomic.Bool
	var connects atomic.Int64
	db := stdlib.OpenDB(*pc, stdlib.OptionAfterConnect(func(context.Context, *pgx.Conn) error {
		if refuse.Load() {
			return errors.New("test: new connections refused")
		}
		connects.Add(1)
		return nil
	}))
	defer db.Close()
	db.SetMaxIdleConns(0)
	const ttl = 2 * time.Second
	l, err := postgres.NewDBWithConfig(db, postgres.Config{PollOnly: true}, locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lk, err := l.Lock(ctx, "renewconn-"+rand.Text())
	if err != nil {
		t.Fatal(err)
	}
	// An Extend renews like a round; once one ran on a kept connection
	// (no connect), the renewals need no new one.
	for range 20 {
		n := connects.Load()
		if err := locker.Extend(ctx, lk); err != nil {
			t.Fatal(err)
		}
		if connects.Load() == n {
			break
		}
	}
	refuse.Store(true)
	select {
	case <-lk.Done():
		t.Fatalf("the lock was lost while new connections were refused: %v", lk.Err())
	case <-time.After(2 * ttl):
	}
	refuse.Store(false)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
