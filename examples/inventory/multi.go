package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
)

// multiResult is the outcome of the multi-SKU run.
type multiResult struct {
	orders     int
	sold       []int // units sold per SKU
	finalStock []int
}

// sellMulti runs workers concurrent sellers whose orders take two or three
// SKUs, listed in random order, under one locker.LockMulti. Each order checks
// every SKU is in stock and then writes each decrement fenced by that SKU's
// token. A worker stops at its first order that meets a sold-out SKU.
func sellMulti(ctx context.Context, endpoints []string, workers, skus, stock int) (multiResult, error) {
	admin, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return multiResult{}, err
	}
	defer admin.Close()
	for s := range skus {
		if _, err := admin.Put(ctx, stockKey(s), strconv.Itoa(stock)); err != nil {
			return multiResult{}, err
		}
		if _, err := admin.Put(ctx, fenceKey(s), fenceText(0)); err != nil {
			return multiResult{}, err
		}
	}

	var mu sync.Mutex
	res := multiResult{sold: make([]int, skus), finalStock: make([]int, skus)}
	ordered := func(order []int) {
		mu.Lock()
		defer mu.Unlock()
		res.orders++
		for _, s := range order {
			res.sold[s]++
		}
	}
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- multiWorker(ctx, endpoints, skus, ordered)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return res, err
		}
	}
	for s := range skus {
		if res.finalStock[s], err = readStock(ctx, admin, stockKey(s)); err != nil {
			return res, err
		}
	}
	return res, nil
}

// multiWorker is one seller of multi-SKU orders with its own client and
// Locker.
func multiWorker(ctx context.Context, endpoints []string, skus int, ordered func([]int)) error {
	cli, l, err := newSeller(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer l.Close()

	errSoldOut := errors.New("sold out")
	for {
		// Two or three distinct SKUs, in random order: the order in which
		// a naive seller would lock them.
		order := rand.Perm(skus)[:2+rand.IntN(min(2, skus-1))]
		keys := make([]string, len(order))
		for i, s := range order {
			keys[i] = skuKey(s)
		}
		ml, err := locker.LockMulti(ctx, l, keys)
		if err != nil {
			return err
		}
		err = sellOrder(ctx, cli, ml, order, errSoldOut)
		if uerr := ml.Unlock(ctx); err == nil && uerr != nil {
			err = uerr
		}
		if err == nil {
			ordered(order)
		}
		if errors.Is(err, errSoldOut) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// sellOrder checks that every SKU of order is in stock, then takes one of
// each, each write fenced by its SKU's token.
func sellOrder(ctx context.Context, cli *clientv3.Client, ml *locker.MultiLock, order []int, errSoldOut error) error {
	for _, s := range order {
		n, err := readStock(ctx, cli, stockKey(s))
		if err != nil {
			return err
		}
		if n <= 0 {
			return errSoldOut
		}
	}
	time.Sleep(2 * time.Millisecond) // check the order, charge the card…
	for _, s := range order {
		if err := fencedDecrement(ctx, cli, s, ml.Token(skuKey(s))); err != nil {
			return err
		}
	}
	return nil
}

// fencedDecrement is "UPDATE stock SET n = n - 1, fence = :token WHERE
// fence < :token": the stock table refuses a write whose token is not
// higher than the last one it took for the SKU.
func fencedDecrement(ctx context.Context, cli *clientv3.Client, sku int, token uint64) error {
	resp, err := cli.Get(ctx, stockKey(sku))
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("%s missing", stockKey(sku))
	}
	kv := resp.Kvs[0]
	n, err := strconv.Atoi(string(kv.Value))
	if err != nil {
		return err
	}
	txn, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(stockKey(sku)), "=", kv.ModRevision),
			clientv3.Compare(clientv3.Value(fenceKey(sku)), "<", fenceText(token))).
		Then(clientv3.OpPut(stockKey(sku), strconv.Itoa(n-1)), clientv3.OpPut(fenceKey(sku), fenceText(token))).
		Commit()
	if err != nil {
		return err
	}
	if !txn.Succeeded {
		return fmt.Errorf("the stock table refused the write of token %d to %s: a stale holder or a concurrent write", token, stockKey(sku))
	}
	return nil
}

func skuKey(s int) string   { return "sku-" + strconv.Itoa(s) }
func stockKey(s int) string { return "inventory/multi/" + skuKey(s) }
func fenceKey(s int) string { return stockKey(s) + "/fence" }

// fenceText writes a token so that etcd's byte order on values is the
// numeric order.
func fenceText(token uint64) string { return fmt.Sprintf("%020d", token) }
