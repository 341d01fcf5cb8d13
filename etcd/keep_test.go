package etcd_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/internal/rerun"
	"github.com/golocker/locker/internal/storeenv"
)

// slowGrant is a Lease client whose Grant answers late while armed: a
// round trip over a slow network.
type slowGrant struct {
	clientv3.Lease
	delay time.Duration
	armed *atomic.Bool
}

func (s slowGrant) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	if s.armed.Load() {
		time.Sleep(s.delay)
	}
	return s.Lease.Grant(ctx, ttl)
}

// TestKeepCountsFromTheCall: the MinHold of a lock unlocked early ends
// MinHold after the acquisition, however long Keep's round trips take: its
// delete timer counts from the call. Here Grant takes longer than what is
// left of the MinHold, so the key must be free as soon as Unlock returns,
// not one MinHold later.
func TestKeepCountsFromTheCall(t *testing.T) {
	const minHold = 3 * time.Second
	srv := storeenv.Etcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	newClient := func() *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Addrs(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	slow := newClient()
	var armed atomic.Bool
	slow.Lease = slowGrant{Lease: slow.Lease, delay: minHold, armed: &armed}
	a, err := etcd.New(slow, locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := etcd.New(newClient(), locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	// A round whose lock was lost at its local deadline during the
	// Unlock (a loaded machine stretched the Keep's slow Grant) says
	// nothing of when the key comes free, and runs again.
	rerun.Starved(t, 3, func(int) error {
		armed.Store(false)
		return keepRound(ctx, t, a, b, &armed, minHold)
	})
}

// keepRound takes a key with MinHold minHold on a, unlocks it while a's
// Grant answers late, and checks that b can take the key soon after. It
// returns the lock's loss when the lock was lost only because no renewal
// came back.
func keepRound(ctx context.Context, t *testing.T, a, b locker.Locker, armed *atomic.Bool, minHold time.Duration) error {
	key := fmt.Sprintf("keep-counts/%x", rand.Uint64())
	lk, err := a.TryLock(ctx, key, locker.MinHold(minHold))
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := lk.Unlock(ctx); err != nil {
		if starved := rerun.StarvedLoss(lk.Err(), locker.ErrLost, locker.ErrNoRenewal); starved != nil {
			return starved
		}
		t.Fatalf("Unlock: %v", err)
	}
	unlocked := time.Now()
	// A generous bound, not a measurement: the MinHold ended before Unlock
	// returned; a timer started after the round trips frees the key a
	// whole MinHold later.
	bound := minHold / 2
	pctx, pcancel := context.WithTimeout(ctx, bound)
	defer pcancel()
	for {
		lb, err := b.TryLock(pctx, key)
		if err == nil {
			t.Logf("the key was free %v after Unlock returned", time.Since(unlocked).Round(time.Millisecond))
			_ = lb.Unlock(ctx)
			return nil
		}
		if pctx.Err() != nil {
			t.Fatalf("the key of a lock whose MinHold ended during its Keep was still claimed %v after Unlock returned: %v", bound, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
