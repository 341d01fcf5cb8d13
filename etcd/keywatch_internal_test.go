package etcd

import (
	"errors"
	"testing"
	"time"

	"github.com/golocker/locker/driver"
)

// TestDeletionSeenAfterCompactedWatch: the watch of a held key starts at a
// compacted revision and ends at once; the next renewal reads the key, so
// a deletion behind the holder's back is still reported, by that renewal
// or by the watch restarted from its read.
func TestDeletionSeenAfterCompactedWatch(t *testing.T) {
	d, ctx, key := sharedDriver(t)
	lost := make(chan error, 1)
	req := driver.Request{Key: key, Owner: "owner", Label: "label", TTL: sharedTTL, Lost: func(err error) {
		select {
		case lost <- err:
		default:
		}
	}}
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	st := g.State.(*lockState)
	// Compact past the key's creation: a watch from the revision after it
	// can no longer start.
	for range 3 {
		if _, err := d.cli.Put(ctx, key+"/filler", "x"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := d.cli.Get(ctx, key+"/filler")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := d.cli.Delete(ctx, key+"/filler"); err != nil {
		t.Fatal(err)
	}
	lease := driver.Lease{Key: key, Owner: req.Owner, Token: g.Token, TTL: sharedTTL, State: st}
	if _, errs, err := d.RenewBatch(ctx, []driver.Lease{lease}); err != nil || errs[0] != nil {
		t.Fatalf("first renewal: %v, %v", err, errs)
	}
	// Deleted behind the holder's back while its watch cannot start.
	if _, err := d.cli.Delete(ctx, st.key); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-lost:
			t.Logf("reported by the watch: %v", err)
			return
		default:
		}
		_, errs, err := d.RenewBatch(ctx, []driver.Lease{lease})
		if err == nil && errors.Is(errs[0], driver.ErrNotHeld) {
			t.Logf("reported by a renewal: %v", errs[0])
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a lock whose key was deleted is still renewed 10s later (last renewal: %v, %v)", err, errs[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
}
