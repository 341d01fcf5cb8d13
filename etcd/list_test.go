package etcd_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/internal/storeenv"
)

// TestListEscapedKeys: keys with '%' and NUL, which KeyPrefix escapes,
// come back from List as they were given; a key that extends another
// ("a" and "a\x01b"), and a waiter queued behind a holder, are each
// listed once.
func TestListEscapedKeys(t *testing.T) {
	srv := storeenv.Etcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Addrs(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	a, err := etcd.New(cli, locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := etcd.New(cli, locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	base := fmt.Sprintf("list-escaped/%x/", rand.Uint64())
	keys := []string{base + "100%", base + "a", base + "a\x01b", base + "nul\x00key"}
	for _, k := range keys {
		if _, err := a.TryLock(ctx, k); err != nil {
			t.Fatalf("TryLock(%q): %v", k, err)
		}
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	waiting := make(chan error, 1)
	go func() { _, err := b.Lock(wctx, base+"a"); waiting <- err }()
	time.Sleep(200 * time.Millisecond) // the waiter queues; a slow start only weakens the check

	var got []string
	for ks, err := range locker.List(ctx, a, base) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ks.Key)
	}
	slices.Sort(keys)
	if !slices.Equal(got, keys) {
		t.Errorf("List(%q) = %q; want %q", base, got, keys)
	}
	stop()
	<-waiting
}
