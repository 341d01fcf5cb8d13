package mysql_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/contend"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
)

// BenchmarkScenarios runs the scenarios of package contend on one MariaDB
// database: this library beside the raw floor, a poller that runs the same
// acquire UPDATE every millisecond until it takes the row and the same
// release UPDATE, each client with a GORM handle and pool of its own:
//
//	go test -run '^$' -bench Scenarios ./integration/mysql/
func BenchmarkScenarios(b *testing.B) {
	dsn := testenv.NewDatabase(b)
	const ttl = 10 * time.Second
	f := newFleet(b, dsn, mysql.Config{})
	f.direct = true
	f.ttl = ttl
	// The table exists once a Locker has run its migration.
	if err := f.newLocker(b).Close(); err != nil {
		b.Fatal(err)
	}
	stmts := mysql.SQL(mysql.DefaultTable)
	// The statements' fence: a day ahead (the server's clock is this
	// machine's), so that the floor never misses for it.
	fence := time.Now().Add(24 * time.Hour).UnixMicro()
	impls := []contend.Impl{
		contend.Locker(func(b *testing.B) locker.Locker {
			l := f.newLocker(b)
			b.Cleanup(func() { _ = l.Close() })
			return l
		}),
		{Name: "floor", New: func(b *testing.B, key string) contend.Mutex {
			_, db := openGorm(b, dsnConfig(b, dsn, ""))
			// Every client makes sure the row exists and is free before the
			// run (a duplicate key is the row another client made).
			_, _ = db.ExecContext(b.Context(), stmts.Insert, key, "setup", "floor", nil, ttl.Microseconds(), fence)
			if _, err := db.ExecContext(b.Context(), "UPDATE "+mysql.DefaultTable+" SET task_status = 'FINISH' WHERE task_name = ?", key); err != nil {
				b.Fatal(err)
			}
			return contend.Func(func(ctx context.Context) (func(context.Context) error, error) {
				owner := rand.Text()
				for {
					res, err := db.ExecContext(ctx, stmts.Acquire, owner, "floor", nil, ttl.Microseconds(), key, fence)
					if err != nil {
						return nil, err
					}
					if n, _ := res.RowsAffected(); n == 1 {
						version, _ := res.LastInsertId()
						return func(ctx context.Context) error {
							res, err := db.ExecContext(ctx, stmts.Release, key, owner, version)
							if err != nil {
								return err
							}
							if n, _ := res.RowsAffected(); n != 1 {
								return fmt.Errorf("floor release of %s affected %d rows", key, n)
							}
							return nil
						}, nil
					}
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(time.Millisecond):
					}
				}
			})
		}},
	}
	contend.Scenarios(b, impls, 3*time.Second)
}
