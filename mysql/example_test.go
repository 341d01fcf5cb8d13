package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/golocker/locker"
	"github.com/golocker/locker/mysql"
)

// openExampleDB opens the application's GORM handle.
func openExampleDB() *gorm.DB {
	db, err := gorm.Open(gormmysql.Open(exampleDSN), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		panic(err)
	}
	return db
}

// Two replicas of a nightly job share one database. Each calls TryDo: the one
// that gets the row runs the job, the other skips it. The row then records
// the run.
func ExampleNew() {
	ctx := context.Background()
	// Each replica (process) has its own GORM handle and Locker.
	newReplica := func(name string) (*gorm.DB, locker.Locker, func()) {
		db := openExampleDB()
		l, err := mysql.New(db, locker.WithTTL(10*time.Second), locker.WithOwnerLabel(name))
		if err != nil {
			panic(err)
		}
		sqlDB, _ := db.DB()
		return db, l, func() { _ = l.Close(); _ = sqlDB.Close() }
	}
	db, a, closeA := newReplica("replica-a")
	defer closeA()
	_, b, closeB := newReplica("replica-b")
	defer closeB()

	const key = "nightly-report"
	err := locker.TryDo(ctx, a, key, func(ctx context.Context) error {
		fmt.Println("replica-a: generating the report")
		// replica-b's timer fires while replica-a still runs: it skips.
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

	run, err := mysql.LastRun(ctx, db, "", key)
	if err != nil {
		panic(err)
	}
	fmt.Println("last run:", run.State, "by", run.OwnerLabel, "finished:", !run.FinishTime.Before(run.StartTime))

	// Output:
	// replica-a: generating the report
	// replica-b: skipped, another replica has it
	// last run: FINISH by replica-a finished: true
}

// Guard ties a GORM transaction to a lock: a holder whose lease ran out (a
// long GC pause, a stopped VM) cannot commit once another replica took over,
// even before it noticed the loss itself.
func ExampleGuard() {
	ctx := context.Background()
	db := openExampleDB()
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	db.Exec("CREATE TABLE IF NOT EXISTS example_stock (id INT PRIMARY KEY, n INT NOT NULL)")
	db.Exec("REPLACE INTO example_stock VALUES (1, 10)")

	replicaA, err := mysql.New(db, locker.WithTTL(time.Minute))
	if err != nil {
		panic(err)
	}
	defer replicaA.Close()
	replicaB, err := mysql.New(db, locker.WithTTL(time.Minute))
	if err != nil {
		panic(err)
	}
	defer replicaB.Close()

	// sell writes only while lk is held, checked inside the transaction.
	sell := func(lk locker.Lock) error {
		return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := mysql.Guard(tx, lk); err != nil {
				return err // rolls back
			}
			return tx.Exec("UPDATE example_stock SET n = n - 1 WHERE id = 1").Error
		})
	}

	a, err := replicaA.TryLock(ctx, "stock:1")
	if err != nil {
		panic(err)
	}
	fmt.Println("A sells:", sell(a))

	// A stalls past its lease. (Here the lease is cut short in the table,
	// instead of waiting a minute.) B takes over and sells.
	db.Exec("UPDATE distribute_task_lock SET lock_until = UTC_TIMESTAMP(6) WHERE task_name = 'stock:1'")
	b, err := replicaB.TryLock(ctx, "stock:1")
	if err != nil {
		panic(err)
	}
	fmt.Println("B sells:", sell(b))

	// A resumes, still believing it holds the lock: the database refuses.
	err = sell(a)
	fmt.Println("A sells again: lost:", errors.Is(err, locker.ErrLost))

	var n int
	db.Raw("SELECT n FROM example_stock WHERE id = 1").Scan(&n)
	fmt.Println("stock:", n)

	// Output:
	// A sells: <nil>
	// B sells: <nil>
	// A sells again: lost: true
	// stock: 8
}

// A nightly job deletes the rows of keys nobody used for a day: one row per
// key stays otherwise (here, one per order). A key purged and locked again
// gets a higher fencing token than it ever had.
func ExamplePurge() {
	ctx := context.Background()
	db := openExampleDB()
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	l, err := mysql.New(db)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	lk, err := l.TryLock(ctx, "order-"+time.Now().Format("150405.000000"))
	if err != nil {
		panic(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		panic(err)
	}
	// Used just now: not idle for a day, kept.
	n, err := mysql.Purge(ctx, db, mysql.DefaultTable, 24*time.Hour)
	if err != nil {
		panic(err)
	}
	fmt.Println("rows purged:", n)
	// Output: rows purged: 0
}
