package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/golocker/locker"
	"github.com/golocker/locker/postgres"
)

// Two replicas of a nightly job share one database. Each calls TryDo: the
// one that gets the row runs the job, the other skips it.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleURL)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := postgres.Config{Table: "example_locks"}
	a, err := postgres.NewWithConfig(pool, cfg, locker.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer a.Close()
	b, err := postgres.NewWithConfig(pool, cfg, locker.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer b.Close()

	key := fmt.Sprintf("nightly-report-%d", time.Now().UnixNano())
	err = locker.TryDo(ctx, a, key, func(ctx context.Context) error {
		fmt.Println("replica-a: generating the report")
		err := locker.TryDo(ctx, b, key, func(context.Context) error {
			fmt.Println("replica-b: generating the report")
			return nil
		})
		if errors.Is(err, locker.ErrNotAcquired) {
			fmt.Println("replica-b: skipped, another replica has it")
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// replica-a: generating the report
	// replica-b: skipped, another replica has it
}

// Guard ties a transaction to a lock: a holder whose lease ran out (a long
// GC pause, a partition) cannot commit writes once another holder may have
// the key.
func ExampleGuard() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleURL)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	l, err := postgres.NewWithConfig(pool, postgres.Config{Table: "example_locks"})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	lk, err := l.TryLock(ctx, fmt.Sprintf("stock-%d", time.Now().UnixNano()))
	if err != nil {
		panic(err)
	}
	write := func() error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if err := postgres.Guard(ctx, tx, lk); err != nil {
			return err
		}
		// The transaction's writes go here.
		return tx.Commit(ctx)
	}
	fmt.Println("while held:", write())
	_ = lk.Unlock(ctx)
	fmt.Println("after Unlock, not held:", errors.Is(write(), locker.ErrNotHeld))
	// Output:
	// while held: <nil>
	// after Unlock, not held: true
}
