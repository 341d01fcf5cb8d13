package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestWaitPredecessorRequeuedUnderItsName: a wait whose predecessor's key
// was deleted and created again under the same name (its Locker queued
// again, now behind the waiter) before the wait's watch began takes the
// lock at once: the predecessor is told by its create revision, not its
// name. A wait that trusted the name would watch a key that waits for it,
// for ever.
func TestWaitPredecessorRequeuedUnderItsName(t *testing.T) {
	srv := storeenv.Etcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Addrs(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	key := fmt.Sprintf("wait-internal/%x", rand.Uint64())

	other, err := New(cli, locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	first, err := other.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	predName := func() string {
		resp, err := cli.Get(ctx, Dir(key), clientv3.WithFirstCreate()...)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("read the holder's key: %v, %v", resp, err)
		}
		return string(resp.Kvs[0].Key)
	}()

	// Our waiter key, queued behind the holder's.
	d := &etcdDriver{cli: cli, sem: make(chan struct{}, 1)}
	if err := d.Configure(ctx, driver.Config{TTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := d.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := d.newState(s, driver.Request{Key: key, Owner: "owner", Label: "test"}, false)
	put, err := cli.Put(ctx, st.key, st.value, clientv3.WithLease(s.id))
	if err != nil {
		t.Fatal(err)
	}
	st.rev = put.Header.Revision

	// The holder leaves and its Locker queues again under the same name,
	// behind us.
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	again := make(chan error, 1)
	go func() {
		lk, err := other.Lock(ctx, key)
		if err == nil {
			err = lk.Unlock(ctx)
		}
		again <- err
	}()
	for {
		resp, err := cli.Get(ctx, predName)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision > st.rev {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The wait was told the old holder's key at its create revision.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := d.wait(wctx, st, predName, int64(first.Token())); err != nil {
		t.Fatalf("wait behind a predecessor that left and queued again behind it: %v, want the lock", err)
	}
	if _, err := cli.Delete(ctx, st.key); err != nil {
		t.Fatal(err)
	}
	if err := <-again; err != nil {
		t.Errorf("the re-queued Locker: %v", err)
	}
}
