package conformance

import (
	"context"
	"sync"
	"time"

	"github.com/golocker/locker"
)

const busyCaller = "a lock, a permit and a read hold must stay held, renewed, while the caller's own slow work holds every connection of the client or pool it gave the Locker"

// testRenewalBesideBusyCaller takes a lock, a permit and a read hold, then
// keeps the handle the caller shares with the Locker busy with the caller's
// own slow work (Harness.Busy) for three TTLs: none of them may be lost,
// and each unlocks once the work ends. A Locker that renews on a connection
// of the caller's pool waits behind that work past its local deadline and
// loses them all, while the store would have answered at once.
func testRenewalBesideBusyCaller(c *caseT) {
	c.need("Busy", c.h.Busy != nil, "keep the caller's client or pool busy with its own slow work")
	contract := c.contract
	busyFor := 3 * c.h.TTL
	ctx := c.ctx(busyFor + c.within(4))
	a, other := c.newLocker(), c.newLocker()

	lk := c.mustTryLock(ctx, a, c.key(), contract)
	holds := []locker.Lock{lk}
	what := []string{"the lock"}
	if s := c.sharedSemaphore(a, c.key(), 1, "the permit and the read hold"); s != nil {
		p, err := s.TryAcquire(ctx)
		if err != nil {
			c.Fatalf("%s: TryAcquire on a free semaphore: %v", contract, err)
		}
		m, err := locker.NewRWMutex(a, c.key())
		if err != nil {
			c.Fatalf("locker.NewRWMutex: %v", err)
		}
		r, err := m.TryRLock(ctx)
		if err != nil {
			c.Fatalf("%s: TryRLock on a free key: %v", contract, err)
		}
		holds = append(holds, p, r)
		what = append(what, "the permit", "the read hold")
	}
	defer func() {
		for _, h := range holds {
			_ = h.Unlock(context.WithoutCancel(ctx))
		}
	}()

	release := sync.OnceFunc(c.h.Busy(c.t, a))
	defer release()
	start := time.Now()
	for {
		for i, h := range holds {
			select {
			case <-h.Done():
				c.Fatalf("%s: %s on %s was lost %v into the caller's busy work (TTL %v): %v", contract, what[i], short(h.Key()), time.Since(start).Round(time.Millisecond), c.h.TTL, h.Err())
			default:
			}
		}
		if time.Since(start) >= busyFor {
			break
		}
		if !sleep(ctx, max(c.h.TTL/4, time.Millisecond)) {
			c.Fatalf("%s: the case ran out of time: %v", contract, ctx.Err())
		}
	}
	release()
	c.refusedWhileHeld(ctx, other, lk, contract+" (the lock, once the caller's work ended)")
	for i, h := range holds {
		if err := h.Unlock(ctx); err != nil {
			c.Errorf("%s: Unlock of %s on %s once the caller's work ended: %v", contract, what[i], short(h.Key()), err)
		}
	}
}
