package etcd_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/integration/internal/lockasync"
)

// TestWaiterBehindCancelledWaiter: a waiter whose predecessor gives up keeps
// waiting for the holder, even when the predecessor's Locker queues again at
// once under the same key name (now behind it), and then gets the key before
// that Locker. A wait that took its predecessor's deletion for its turn, or
// that read the queue before that deletion, or that looked its predecessor
// up by name, fails here: it takes the key from the holder, or waits for the
// re-queued key behind it for ever.
func TestWaiterBehindCancelledWaiter(t *testing.T) {
	eps, ctx, admin, key, lk := heldKey(t)
	var released atomic.Bool // set before the holder unlocks
	type acq struct {
		name  string
		token uint64
	}
	var (
		mu    sync.Mutex
		order []acq
	)
	got := func(name string, lk locker.Lock) {
		if !released.Load() {
			t.Errorf("%s got the key while the holder held it", name)
		}
		mu.Lock()
		order = append(order, acq{name, lk.Token()})
		mu.Unlock()
		if err := lk.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock: %v", name, err)
		}
	}

	quitter := newLocker(t, eps)
	qctx, qcancel := context.WithCancel(ctx)
	quit := lockasync.Lock(qctx, quitter, key)
	waitFor(t, 10*time.Second, "the first waiter to queue", func() bool { return len(waiters(t, admin, key)) == 2 })
	name := waiters(t, admin, key)[1].key

	second := lockasync.Lock(ctx, newLocker(t, eps), key)
	waitFor(t, 10*time.Second, "the second waiter to queue", func() bool { return len(waiters(t, admin, key)) == 3 })

	qcancel()
	if r := <-quit; !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want context.Canceled", r.Err)
	}
	again := lockasync.Lock(ctx, quitter, key)
	waitFor(t, 10*time.Second, "the first waiter's Locker to queue again", func() bool {
		ws := waiters(t, admin, key)
		return len(ws) == 3 && ws[2].key == name
	})
	// Time for a wrong wait to take the key.
	time.Sleep(200 * time.Millisecond)
	select {
	case r := <-second:
		t.Fatalf("the second waiter returned while the holder held the key: %v, %v", r.Lock, r.Err)
	default:
	}

	var wg sync.WaitGroup
	wg.Go(func() {
		if r := <-second; r.Err != nil {
			t.Errorf("second waiter: %v", r.Err)
		} else {
			got("second", r.Lock)
		}
	})
	wg.Go(func() {
		if r := <-again; r.Err != nil {
			t.Errorf("re-queued waiter: %v", r.Err)
		} else {
			got("requeued", r.Lock)
		}
	})
	released.Store(true)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(order) != 2 || order[0].name != "second" || order[0].token <= lk.Token() || order[1].token <= order[0].token {
		t.Errorf("acquisitions %v after the holder's token %d, want the second waiter first, then the re-queued one, tokens rising", order, lk.Token())
	}
}
