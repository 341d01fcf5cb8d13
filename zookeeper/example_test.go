package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/zookeeper"
)

// The quick start: the session timeout and the TTL are the same duration.
func Example() {
	const ttl = 10 * time.Second
	conn, events, err := zk.Connect(zkServers, ttl, zk.WithLogInfo(false))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	l, err := zookeeper.New(conn, events, locker.WithTTL(ttl), locker.WithPrefix("billing:"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	ctx := context.Background()
	err = locker.Do(ctx, l, "invoice-run", func(ctx context.Context) error {
		// ctx is cancelled, with a cause matching locker.ErrLost, if the
		// lock is lost while the function runs.
		fmt.Println("running the invoices")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: running the invoices
}

// Guard makes a write conditional on still holding the lock: ZooKeeper
// refuses the whole multi-operation once the lock is gone.
func ExampleGuard() {
	const ttl = 10 * time.Second
	conn, events, err := zk.Connect(zkServers, ttl, zk.WithLogInfo(false))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	l, err := zookeeper.New(conn, events, locker.WithTTL(ttl))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	if _, err := conn.Create("/example-config", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		log.Fatal(err)
	}
	lk, err := l.Lock(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	write := func(v string) error {
		check, err := zookeeper.Guard(lk)
		if err != nil {
			return err
		}
		_, err = conn.Multi(check, &zk.SetDataRequest{Path: "/example-config", Data: []byte(v), Version: -1})
		return err
	}
	fmt.Println("while held:", write("v1"))
	if err := lk.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after unlock:", errors.Is(write("v2"), zk.ErrNoNode))
	data, _, _ := conn.Get("/example-config")
	fmt.Println("data:", string(data))
	// Output:
	// while held: <nil>
	// after unlock: true
	// data: v1
}

// Config sets where the locks live and their ACL.
func ExampleConfig() {
	const ttl = 10 * time.Second
	conn, events, err := zk.Connect(zkServers, ttl, zk.WithLogInfo(false))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	if err := conn.AddAuth("digest", []byte("billing:s3cret")); err != nil {
		log.Fatal(err)
	}

	l, err := zookeeper.Config{
		Root: "/billing/locks",
		ACL:  zk.DigestACL(zk.PermAll, "billing", "s3cret"),
	}.New(conn, events, locker.WithTTL(ttl))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	ctx := context.Background()
	lk, err := l.TryLock(ctx, "customer/42")
	if err != nil {
		log.Fatal(err)
	}
	check, err := zookeeper.Guard(lk)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(check.Path[:len("/billing/locks/customer%2F42/_c_")])
	if err := lk.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: /billing/locks/customer%2F42/_c_
}
