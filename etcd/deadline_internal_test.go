package etcd

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

// TestLossPastDeadlineIsNoRenewal: a lock that the next keep-alive finds
// past its deadline (the process stalled, and the driver's keep-alive ran
// before the engine's deadline timer) is reported lost for want of a
// renewal, as the engine reports it: its cause wraps locker.ErrNoRenewal,
// which the Observer's LossDeadline and the tests' re-runs read. Its key
// is deleted.
func TestLossPastDeadlineIsNoRenewal(t *testing.T) {
	d, ctx, _ := sharedDriver(t)
	key := fmt.Sprintf("deadline-internal/%x", rand.Uint64())
	causes := make(chan error, 4)
	req := driver.Request{Key: key, Owner: "stalled", Label: "stalled", TTL: sharedTTL, Lost: func(err error) { causes <- err }}
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	st := g.State.(*lockState)
	d.mu.Lock()
	st.validUntil = time.Now().Add(-time.Millisecond) // as after a stall
	d.mu.Unlock()
	s, err := d.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.acquireSem(ctx); err != nil {
		t.Fatal(err)
	}
	err = d.keepAliveLocked(ctx, s)
	d.releaseSem()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, locker.ErrNoRenewal) {
			t.Errorf("a lock past its deadline at the keep-alive was lost with %v, which does not wrap locker.ErrNoRenewal", cause)
		}
	default:
		t.Fatal("a lock past its deadline at the keep-alive was not reported lost")
	}
	resp, err := d.cli.Get(ctx, st.key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("the key of a lock lost past its deadline is still there: %q", resp.Kvs[0].Value)
	}
}
