package etcd

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/golocker/locker/driver"
)

// TestQueuedViewSavesReads: a queued permit request, woken by a deletion
// that cannot let it in (a waiter behind it leaves), is refused without a
// round trip; once the holder leaves, its next attempt is let in with the
// claim of its key alone, and gets the permit.
func TestQueuedViewSavesReads(t *testing.T) {
	holder, ctx, key := sharedDriver(t)
	other, _, _ := sharedDriver(t)
	var txns atomic.Int64
	waiter := driverWith(ctx, t, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasSuffix(method, "/Txn") || strings.HasSuffix(method, "/Range") {
				txns.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))

	req := func(owner string) driver.Request {
		return driver.Request{Key: key, Owner: owner, Label: owner, TTL: sharedTTL, Lost: func(error) {}}
	}
	share := driver.Share{Mode: driver.Permits, Limit: 1, Weight: 1, Queue: true}
	g, err := holder.TryAcquireShared(ctx, req("holder"), share)
	if err != nil {
		t.Fatal(err)
	}
	// The waiter queues, subscribes, and reads again, as the engine's wait
	// does.
	if _, err := waiter.TryAcquireShared(ctx, req("waiter"), share); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("first attempt behind a holder: %v", err)
	}
	wake, stop, err := waiter.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := waiter.TryAcquireShared(ctx, req("waiter"), share); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("attempt after subscribing: %v", err)
	}
	// A later waiter leaves: a deletion behind the waiter.
	if _, err := other.TryAcquireShared(ctx, req("later"), share); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("later arrival: %v", err)
	}
	var r *driver.Residue
	_, err = other.TryAcquireShared(ctx, req("later"), share)
	if !errors.As(err, &r) {
		t.Fatalf("later arrival's second attempt: %v", err)
	}
	if err := r.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	awaitWake(ctx, t, wake)
	before := txns.Load()
	if _, err := waiter.TryAcquireShared(ctx, req("waiter"), share); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("attempt after a later waiter left: %v", err)
	}
	if n := txns.Load() - before; n != 0 {
		t.Errorf("a wake-up that cannot let the waiter in sent %d reads or transactions, want 0", n)
	}
	if err := holder.Release(ctx, driver.Lease{Key: key, Owner: "holder", Token: g.Token, TTL: sharedTTL, State: g.State}); err != nil {
		t.Fatal(err)
	}
	awaitWake(ctx, t, wake)
	before = txns.Load()
	wg, err := waiter.TryAcquireShared(ctx, req("waiter"), share)
	if err != nil {
		t.Fatalf("attempt after the holder left: %v", err)
	}
	if n := txns.Load() - before; n != 1 {
		t.Errorf("the attempt that let the waiter in sent %d reads or transactions, want 1 (the claim)", n)
	}
	if wg.Token <= g.Token {
		t.Errorf("the waiter's token %d is not above the holder's %d", wg.Token, g.Token)
	}
}

// awaitWake waits for a wake-up of a Subscribe.
func awaitWake(ctx context.Context, t *testing.T, wake <-chan struct{}) {
	t.Helper()
	select {
	case <-wake:
	case <-ctx.Done():
		t.Fatal("no wake-up from the key's watch")
	}
}

// TestViewIgnoresDeletionsBeforeItsRead: a queued request's view strikes
// out a key ahead only for a deletion after the read the view comes from.
// A key's name may outlive the key: a watch that lags reports the
// deletion of an earlier key of the name after the read showed a later one
// ahead, and must not let the request in beside it.
func TestViewIgnoresDeletionsBeforeItsRead(t *testing.T) {
	one, queue := permitsOf(1, 1, false), permitsOf(1, 1, true)
	for _, tc := range []struct {
		name string
		// again deletes a key and grants another under its name, while
		// the waiter's watch lags, and returns that name and the owner
		// and grant of its holder. g holds key's permit of 1.
		again func(ctx context.Context, t *testing.T, holder *etcdDriver, key string, g driver.Grant) (string, string, driver.Grant)
	}{{
		// A Locker's next permit takes its last one's name
		// (sharename.go).
		name: "NextPermit",
		again: func(ctx context.Context, t *testing.T, holder *etcdDriver, key string, g driver.Grant) (string, string, driver.Grant) {
			releaseHold(ctx, t, holder, key, "first", g)
			next, err := holder.TryAcquireShared(ctx, limitReq(key, "next"), one)
			if err != nil {
				t.Fatal(err)
			}
			return g.State.(*lockState).key, "next", next
		},
	}, {
		// A queued request whose key was deleted by hand creates it
		// again at its next attempt, and is granted.
		name: "WaiterQueuedAgain",
		again: func(ctx context.Context, t *testing.T, holder *etcdDriver, key string, g driver.Grant) (string, string, driver.Grant) {
			if _, err := holder.TryAcquireShared(ctx, limitReq(key, "again"), queue); !errors.Is(err, driver.ErrHeld) {
				t.Fatalf("a request behind a permit of 1: got %v, want ErrHeld", err)
			}
			name := keyOf(ctx, t, holder, key, "again")
			if _, err := holder.cli.Delete(ctx, name); err != nil {
				t.Fatal(err)
			}
			releaseHold(ctx, t, holder, key, "first", g)
			again, err := holder.TryAcquireShared(ctx, limitReq(key, "again"), queue)
			if err != nil {
				t.Fatalf("a queued request, alone once its key was deleted: %v", err)
			}
			return name, "again", again
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			holder, ctx, key := sharedDriver(t)
			waiter, _, _ := sharedDriver(t)
			lag := &laggingWatcher{Watcher: waiter.cli.Watcher, key: Dir(key)}
			waiter.cli.Watcher = lag

			first, err := holder.TryAcquireShared(ctx, limitReq(key, "first"), one)
			if err != nil {
				t.Fatal(err)
			}
			wake, stop, err := waiter.Subscribe(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			// The waiter's watch lags: the deletion and the grant
			// reach its reads before its watch.
			lag.pause()
			name, owner, g := tc.again(ctx, t, holder, key, first)
			if k := g.State.(*lockState).key; k != name {
				t.Fatalf("the holder's key %q is not named after the deleted key %q: the test cannot tell", k, name)
			}
			if _, err := waiter.TryAcquireShared(ctx, limitReq(key, "waiter"), queue); !errors.Is(err, driver.ErrHeld) {
				t.Fatalf("a request behind a held permit of 1: got %v, want ErrHeld", err)
			}
			lag.resume()
			awaitWake(ctx, t, wake)
			if w, err := waiter.TryAcquireShared(ctx, limitReq(key, "waiter"), queue); err == nil {
				t.Fatalf("a permit of 1 was granted (token %d) while another holds it (token %d): the deletion of an earlier key of the holder's key's name let the waiter in", w.Token, g.Token)
			} else if !errors.Is(err, driver.ErrHeld) {
				t.Fatalf("a request behind a held permit of 1, once its watch caught up: got %v, want ErrHeld", err)
			}
			releaseHold(ctx, t, holder, key, owner, g)
			for {
				// A wake-up may be one of the lagging deletions'.
				awaitWake(ctx, t, wake)
				w, err := waiter.TryAcquireShared(ctx, limitReq(key, "waiter"), queue)
				if err == nil {
					releaseHold(ctx, t, waiter, key, "waiter", w)
					break
				}
				if !errors.Is(err, driver.ErrHeld) {
					t.Fatalf("the waiter after the holder left: %v", err)
				}
			}
		})
	}
}

// keyOf returns the name of the key of owner's shared request on key.
func keyOf(ctx context.Context, t *testing.T, d *etcdDriver, key, owner string) string {
	t.Helper()
	resp, err := d.cli.Get(ctx, Dir(key), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if f := strings.Fields(string(kv.Value)); len(f) > 4 && f[4] == owner {
			return string(kv.Key)
		}
	}
	t.Fatalf("no key of %s's request on %q", owner, key)
	return ""
}

// laggingWatcher holds back the events of its watches of key while it is
// paused: a watch stream that lags behind the reads.
type laggingWatcher struct {
	clientv3.Watcher
	key  string
	mu   sync.Mutex
	gate chan struct{} // closed while not paused; nil at first
}

func (w *laggingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	wch := w.Watcher.Watch(ctx, key, opts...)
	if key != w.key {
		return wch
	}
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for resp := range wch {
			if !resp.Created {
				select {
				case <-w.gated():
				case <-ctx.Done():
				}
			}
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// gated returns a channel closed while the watcher is not paused.
func (w *laggingWatcher) gated() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gate == nil {
		w.gate = make(chan struct{})
		close(w.gate)
	}
	return w.gate
}

func (w *laggingWatcher) pause() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate = make(chan struct{})
}

func (w *laggingWatcher) resume() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.gate)
}
