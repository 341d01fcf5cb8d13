package mysql_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/sharedbench"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/mysql"
)

// BenchmarkSharedUncontended: see sharedbench.Uncontended (sem-x-lock and
// rlock-x-lock, target ≤ 1.3), with and without named-lock wake-ups; and,
// in the VsFloor runs, a permit against the raw floor (see benchSharedFloor).
func BenchmarkSharedUncontended(b *testing.B) {
	dsn := testenv.NewDatabase(b)
	for _, name := range []string{"Notify", "PollOnly"} {
		cfg := mysql.Config{PollOnly: name == "PollOnly"}
		b.Run(name, func(b *testing.B) {
			f := newFleet(b, dsn, cfg)
			f.direct = true
			sharedbench.Uncontended(b, sharedbench.Closing(b, f.newLocker(b)), "bench/"+rand.Text()[:8])
		})
		b.Run(name+"VsFloor", func(b *testing.B) { benchSharedFloor(b, dsn, cfg) })
	}
}

// BenchmarkSharedHandoff: see sharedbench.Handoff (permit-x-lock, target
// ≤ 2), with and without named-lock wake-ups; holder and waiter are
// Lockers of their own pools.
//
//	go test -run '^$' -bench SharedHandoff ./integration/mysql/
func BenchmarkSharedHandoff(b *testing.B) {
	dsn := testenv.NewDatabase(b)
	for _, name := range []string{"Notify", "PollOnly"} {
		b.Run(name, func(b *testing.B) {
			f := newFleet(b, dsn, mysql.Config{PollOnly: name == "PollOnly"})
			f.direct = true
			sharedbench.Handoff(b, sharedbench.Closing(b, f.newLocker(b)), sharedbench.Closing(b, f.newLocker(b)), "bench/"+rand.Text()[:8])
		})
	}
}

// BenchmarkSharedThroughput: see sharedbench.Throughput (x-limit1, limit 4
// ÷ limit 1); each client is a Locker of its own pool.
//
//	go test -run '^$' -bench SharedThroughput ./integration/mysql/
func BenchmarkSharedThroughput(b *testing.B) {
	f := newFleet(b, testenv.NewDatabase(b), mysql.Config{})
	f.direct = true
	sharedbench.Throughput(b, func() locker.Locker { return sharedbench.Closing(b, f.newLocker(b)) }, "bench/"+rand.Text()[:8])
}

// benchSharedFloor runs sharedbench.VsFloor with, as the floor, mysql.SQL's
// Hold and Leave, prepared on a pool of their own, on a key whose row
// exists.
func benchSharedFloor(b *testing.B, dsn string, cfg mysql.Config) {
	ctx := b.Context()
	prefix := "bench-" + rand.Text()[:8] + "/"
	gdb, _ := openGorm(b, dsnConfig(b, dsn, ""))
	l, err := cfg.New(gdb, locker.WithTTL(10*time.Second), locker.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	floorSem, err := locker.NewSemaphore(l, "floor", 4)
	if err != nil {
		b.Fatal(err)
	}
	// The floor's key has its row, from a permit that left.
	p, err := floorSem.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	_, raw := openGorm(b, dsnConfig(b, dsn, ""))
	stmts := mysql.SQL(mysql.DefaultTable)
	hold, err := raw.PrepareContext(ctx, stmts.Hold)
	if err != nil {
		b.Fatal(err)
	}
	defer hold.Close()
	leave, err := raw.PrepareContext(ctx, stmts.Leave)
	if err != nil {
		b.Fatal(err)
	}
	defer leave.Close()
	owner, ttl := rand.Text(), (10 * time.Second).Microseconds()
	// The statement's fence: an hour ahead (the server's clock is this
	// machine's), so that the floor never misses for it.
	fence := time.Now().Add(time.Hour).UnixMicro()
	sharedbench.VsFloor(b, l, "bench", func(ctx context.Context) error {
		res, err := hold.ExecContext(ctx, owner, "floor", "1 1 4", ttl, prefix+"floor", fence)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("floor hold affected %d rows, want 1", n)
		}
		token, _ := res.LastInsertId()
		res, err = leave.ExecContext(ctx, prefix+"floor", owner, token)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("floor leave affected %d rows, want 1", n)
		}
		return nil
	})
}
