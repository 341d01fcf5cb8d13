// Command inventory is the oversell demo: 16 workers sell a limited stock
// kept in a shared store (a real etcd started inside this process), each
// with its own client, as 16 replicas would. Every sale checks that stock is
// left, thinks for a moment, and decrements it.
//
// Without a lock, sales interleave: more orders are taken than there are
// items and the stock ends negative. With locker.Do around each sale, the
// stock ends at exactly 0 with exactly as many orders as items.
//
// Then orders of two or three SKUs, listed in random order, sell several
// SKUs under locker.LockMulti: no SKU is oversold, no two orders deadlock,
// and each write carries its SKU's fencing token, which the stock table
// checks.
//
//	go run ./examples/inventory
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/internal/etcdserver"
)

func main() {
	workers := flag.Int("workers", 16, "concurrent sellers, each with its own client")
	stock := flag.Int("stock", 50, "items in stock at the start")
	flag.Parse()
	if *workers < 1 || *stock < 1 {
		fmt.Fprintln(os.Stderr, "inventory: -workers and -stock must be positive")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Stdout, *workers, *stock); err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
}

// result is the outcome of one run.
type result struct {
	orders     int // sales that went through
	finalStock int
}

func run(ctx context.Context, out io.Writer, workers, stock int) error {
	srv, err := etcdserver.Start(ctx, etcdserver.Config{})
	if err != nil {
		return fmt.Errorf("start embedded etcd: %w", err)
	}
	defer srv.Close()
	fmt.Fprintf(out, "%d workers sell %d items kept in etcd (embedded at %s)\n\n", workers, stock, srv.Endpoint())

	unlocked, err := sell(ctx, srv.Endpoints(), workers, stock, false)
	if err != nil {
		return err
	}
	locked, err := sell(ctx, srv.Endpoints(), workers, stock, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%-22s %12s %12s\n", "", "no lock", "locker.Do")
	fmt.Fprintf(out, "%-22s %12d %12d\n", "items at the start", stock, stock)
	fmt.Fprintf(out, "%-22s %12d %12d\n", "orders taken", unlocked.orders, locked.orders)
	fmt.Fprintf(out, "%-22s %12d %12d\n", "stock at the end", unlocked.finalStock, locked.finalStock)
	fmt.Fprintf(out, "%-22s %12d %12d\n", "oversold", unlocked.orders-stock, locked.orders-stock)
	if locked.finalStock != 0 || locked.orders != stock {
		return fmt.Errorf("with the lock: %d orders and stock %d, want %d and 0", locked.orders, locked.finalStock, stock)
	}

	const skus = 4
	multi, err := sellMulti(ctx, srv.Endpoints(), workers, skus, stock)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\norders of 2-3 SKUs (locker.LockMulti): %d orders\n", multi.orders)
	oversold := 0
	for s := range skus {
		fmt.Fprintf(out, "%-22s %6d sold %6d left\n", skuKey(s), multi.sold[s], multi.finalStock[s])
		if multi.finalStock[s] < 0 || multi.sold[s] != stock-multi.finalStock[s] {
			oversold++
		}
	}
	fmt.Fprintf(out, "%-22s %6d\n", "SKUs oversold", oversold)
	if oversold != 0 {
		return fmt.Errorf("with LockMulti: %d SKUs oversold or miscounted", oversold)
	}
	return nil
}

// sell runs workers concurrent sellers until each sees the stock at 0.
func sell(ctx context.Context, endpoints []string, workers, stock int, withLock bool) (result, error) {
	const key = "inventory/sku-1"
	admin, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return result{}, err
	}
	defer admin.Close()
	if _, err := admin.Put(ctx, key, strconv.Itoa(stock)); err != nil {
		return result{}, err
	}

	var mu sync.Mutex
	var res result
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- worker(ctx, endpoints, key, withLock, func() { mu.Lock(); res.orders++; mu.Unlock() })
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return res, err
		}
	}
	n, err := readStock(ctx, admin, key)
	res.finalStock = n
	return res, err
}

// worker is one seller with its own etcd client and Locker.
func worker(ctx context.Context, endpoints []string, key string, withLock bool, ordered func()) error {
	cli, l, err := newSeller(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer l.Close()

	errSoldOut := errors.New("sold out")
	saleOnce := func(ctx context.Context) error {
		n, err := readStock(ctx, cli, key)
		if err != nil {
			return err
		}
		if n <= 0 {
			return errSoldOut
		}
		time.Sleep(2 * time.Millisecond) // check the order, charge the card…
		if err := decrement(ctx, cli, key); err != nil {
			return err
		}
		ordered()
		return nil
	}
	for {
		var err error
		if withLock {
			err = locker.Do(ctx, l, "sku-1", saleOnce)
		} else {
			err = saleOnce(ctx)
		}
		if errors.Is(err, errSoldOut) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// newSeller returns a seller's own etcd client and the Locker on it, as
// one replica has.
func newSeller(endpoints []string) (*clientv3.Client, locker.Locker, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	l, err := etcd.New(cli, locker.WithTTL(5*time.Second), locker.WithPrefix("inventory-demo/"))
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return cli, l, nil
}

// decrement is the store's "UPDATE stock SET n = n - 1": atomic on its own
// (compare-and-swap on the key's revision), but nothing ties it to the
// earlier check that stock was left.
func decrement(ctx context.Context, cli *clientv3.Client, key string) error {
	for {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("%s missing", key)
		}
		kv := resp.Kvs[0]
		n, err := strconv.Atoi(string(kv.Value))
		if err != nil {
			return err
		}
		txn, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key, strconv.Itoa(n-1))).
			Commit()
		if err != nil {
			return err
		}
		if txn.Succeeded {
			return nil
		}
	}
}

func readStock(ctx context.Context, cli *clientv3.Client, key string) (int, error) {
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("%s missing", key)
	}
	return strconv.Atoi(string(resp.Kvs[0].Value))
}
