package mysql_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/renewtest"
	"github.com/golocker/locker/mysql"
)

// TestRenewalsDoNotWaitForTheCallersPool: the caller's own slow queries
// hold every connection of its pool (MaxOpenConns 4) for three TTLs; the
// Locker's lock, permit and read hold must stay held, while the server
// answers at once. Renewals that took a connection from the pool waited
// behind those queries and lost all three.
func TestRenewalsDoNotWaitForTheCallersPool(t *testing.T) {
	const ttl = time.Second
	const slow = "SELECT SLEEP(3)"
	for _, hk := range renewtest.Holds {
		t.Run(hk.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			gdb := openDB(t, exampleDSN)
			db, err := gdb.DB()
			if err != nil {
				t.Fatal(err)
			}
			db.SetMaxOpenConns(4) // the caller's queries take every one the Locker does not keep
			l, err := mysql.Config{PollOnly: true}.New(gdb, locker.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lk, err := hk.Try(ctx, l, "busypool-"+rand.Text())
			if err != nil {
				t.Fatal(err)
			}
			renewtest.KeptBesideBusyQueries(ctx, t, lk, hk.Name, ttl, 4, func(ctx context.Context) error {
				_, err := db.ExecContext(ctx, slow)
				return err
			}, func() int { return db.Stats().InUse })
		})
	}
}
