package redis

import (
	"context"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// TestNeverEndingCallsTakeNoSlot: an owned client runs the calls of a
// caller whose ctx never ends on its closing pool, with no slot of their
// own, and Close closes that pool. Such calls took a slot each, armed
// with a context.AfterFunc, because the engine's call ctx ends at Close.
func TestNeverEndingCallsTakeNoSlot(t *testing.T) {
	oc := newOwnedClient(clientOptions(storeenv.Redis(t).Addr()))
	t.Cleanup(func() { _ = oc.Close() })
	l, d := newTestLocker(t, oc, locker.WithTTL(benchTTL))
	// The eviction check's ctx has a deadline: it takes a slot.
	<-d.checked
	oc.mu.Lock()
	for _, s := range oc.idle {
		_ = s.client.Close()
	}
	oc.idle = nil
	oc.mu.Unlock()
	ctx := context.Background()
	key := uniqueKey(t)
	sem, err := locker.NewSemaphore(l, key+".sem", 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := acquireRelease(ctx, func() (locker.Lock, error) { return l.Lock(ctx, key) }); err != nil {
		t.Fatal(err)
	}
	if err := acquireRelease(ctx, func() (locker.Lock, error) { return sem.Acquire(ctx) }); err != nil {
		t.Fatal(err)
	}
	oc.mu.Lock()
	slots := len(oc.idle)
	oc.mu.Unlock()
	if slots != 0 {
		t.Errorf("a Lock, an Unlock and a permit with context.Background() left %d idle slots; want none: such calls run on the closing pool", slots)
	}
	cp := oc.closing.Load()
	if cp == nil {
		t.Fatal("the Locker gave its owned client no closing pool")
	}
	if st := cp.client.PoolStats(); st.Hits+st.Misses == 0 {
		t.Error("the closing pool served none of the calls with context.Background()")
	}
	_ = l.Close()
	select {
	case <-cp.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the Locker's Close did not close the closing pool")
	}
}
