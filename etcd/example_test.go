package etcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/internal/storeenv"
)

// endpoints stands for the addresses of your etcd cluster, such as
// []string{"localhost:2379"}. The examples run against the cluster of
// LOCKER_ETCD_ENDPOINTS, which `make test` starts.
func endpoints() []string { return storeenv.List(storeenv.EtcdEndpoints) }

// The quick start: one Locker per process on your etcd client; Do runs a
// function while holding a key.
func Example() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	lk, err := etcd.New(cli, locker.WithTTL(10*time.Second), locker.WithPrefix("locks/"))
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Close()

	ctx := context.Background()
	err = locker.Do(ctx, lk, "nightly-report", func(ctx context.Context) error {
		// ctx ends if the lock is lost.
		fmt.Println("building the nightly report")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: building the nightly report
}

// Guard makes a write conditional on still holding the lock: etcd itself
// refuses it once the lock is gone, however late the write arrives.
func ExampleGuard() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	lk, err := etcd.New(cli, locker.WithTTL(10*time.Second), locker.WithPrefix("locks/"))
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Close()

	ctx := context.Background()
	l, err := lk.Lock(ctx, "balance")
	if err != nil {
		log.Fatal(err)
	}
	owner, err := etcd.Guard(l)
	if err != nil {
		log.Fatal(err)
	}
	write := func(v string) bool {
		resp, err := cli.Txn(ctx).If(owner).Then(clientv3.OpPut("accounts/balance", v)).Commit()
		if err != nil {
			log.Fatal(err)
		}
		return resp.Succeeded
	}
	fmt.Println("written while holding the lock:", write("10"))
	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("written after Unlock:", write("20"))
	// Output:
	// written while holding the lock: true
	// written after Unlock: false
}
