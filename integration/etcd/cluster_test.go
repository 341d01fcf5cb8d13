package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/internal/etcdserver"
)

// TestClusterLeaderFailover runs a mutual-exclusion workload on a 3-member
// cluster while its leader is stopped and restarted, twice: no two holders
// overlap, tokens keep increasing, and the workload makes progress while a
// member is down and after it is back.
func TestClusterLeaderFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := etcdserver.StartCluster(ctx, 3, etcdserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eps := c.Endpoints()
	admin := newClient(t, eps)
	// A leader election takes about a second: the TTL leaves room for it,
	// and for the race detector.
	const ttl = 3 * time.Second
	key := uniqueKey(t)

	var (
		occupancy  atomic.Int32
		overlaps   atomic.Int64
		acquired   atomic.Int64
		lost       atomic.Int64
		lockErrs   atomic.Int64
		counter    atomic.Int64
		tokenMu    sync.Mutex
		lastToken  uint64
		tokenErrs  []error
		stop       = make(chan struct{})
		wg         sync.WaitGroup
		lastErrMu  sync.Mutex
		lastErrors []error
	)
	for range 3 {
		cli := newClient(t, eps)
		l, err := etcd.New(cli, locker.WithTTL(ttl), locker.WithPrefix(testPrefix))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for range 2 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
					lk, err := l.Lock(lctx, key)
					lcancel()
					if err != nil {
						// A Txn cut by a stopped member: the wait fails, the
						// caller tries again.
						lockErrs.Add(1)
						lastErrMu.Lock()
						if len(lastErrors) < 3 {
							lastErrors = append(lastErrors, err)
						}
						lastErrMu.Unlock()
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if occupancy.Add(1) != 1 {
						overlaps.Add(1)
					}
					acquired.Add(1)
					v := counter.Load()
					time.Sleep(time.Millisecond)
					counter.Store(v + 1)
					tokenMu.Lock()
					if tok := lk.Token(); tok <= lastToken {
						tokenErrs = append(tokenErrs, fmt.Errorf("token %d after %d", tok, lastToken))
					} else {
						lastToken = tok
					}
					tokenMu.Unlock()
					if occupancy.Load() != 1 {
						overlaps.Add(1)
					}
					occupancy.Add(-1)
					if lk.Err() != nil {
						lost.Add(1)
					}
					uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
					if err := lk.Unlock(uctx); err != nil && !errors.Is(err, locker.ErrNotHeld) {
						lockErrs.Add(1)
					}
					ucancel()
				}
			})
		}
	}

	// The phases only log their progress: a request caught by the leader's
	// stop waits for etcd's request timeout (about 6 s) before it fails, and
	// may hold the key that long.
	phase := func(name string, d time.Duration) {
		before := acquired.Load()
		time.Sleep(d)
		t.Logf("%s: %d acquisitions in %v", name, acquired.Load()-before, d)
	}
	phase("before", time.Second)
	for round := range 2 {
		leader, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := leader.Stop(); err != nil {
			t.Fatal(err)
		}
		phase(fmt.Sprintf("round %d, leader %s stopped", round, leader.Name()), 2*time.Second)
		if err := leader.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		phase(fmt.Sprintf("round %d, %s restarted", round, leader.Name()), time.Second)
	}
	// Once the cluster is whole again, the workload goes on.
	const more = 50
	target := acquired.Load() + more
	deadline := time.Now().Add(30 * time.Second)
	for acquired.Load() < target && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if acquired.Load() < target {
		t.Errorf("after the cluster was whole again, the workload made %d of %d acquisitions in 30 s; the lock's directory holds: %s", acquired.Load()-target+more, more, describeDir(t, admin, key))
	}
	close(stop)
	wg.Wait()

	t.Logf("%d acquisitions, %d failed Lock or Unlock calls (first: %v), %d locks lost", acquired.Load(), lockErrs.Load(), lastErrors, lost.Load())
	if n := overlaps.Load(); n > 0 {
		t.Errorf("a key must never be granted to two holders at once: holders overlapped %d times", n)
	}
	if got, want := counter.Load(), acquired.Load(); got != want {
		t.Errorf("a key must never be granted to two holders at once: %d increments under the lock left the counter at %d", want, got)
	}
	if len(tokenErrs) > 0 {
		t.Errorf("tokens must increase from holder to holder, across leader changes: %v", tokenErrs)
	}
}

// describeDir lists the waiter keys of key for a failure message.
func describeDir(t *testing.T, cli *clientv3.Client, key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, etcd.Dir(testPrefix+key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		ttl := int64(-2)
		if r, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil {
			ttl = r.TTL
		}
		fmt.Fprintf(&b, "\n\t%q rev %d lease %x (ttl %d) value %q", kv.Key, kv.CreateRevision, kv.Lease, ttl, kv.Value)
	}
	return b.String()
}
