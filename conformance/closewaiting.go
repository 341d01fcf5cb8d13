package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker"
)

// Contracts of CloseWhileWaiting, quoted by its failure messages.
const (
	closeWaiting = "Close of a Locker cut off from the store must return within a bounded time while its waits are in progress, and end each of them within that time with an error matching ErrClosed"
	closedWaits  = "the waits of a Locker closed while cut off from the store must not hold up what they waited for longer than a TTL"
)

// blockedWait is one wait of CloseWhileWaiting: a call of the closed
// Locker, what keeps it waiting, and how a third Locker takes that.
type blockedWait struct {
	what    string
	wait    func(context.Context, ...locker.LockOption) (locker.Lock, error)
	blocker locker.Lock
	retake  func(context.Context, ...locker.LockOption) (locker.Lock, error)
	res     chan lockResult
	at      time.Time // when the wait returned
}

// blockedWaits returns the waits of CloseWhileWaiting on fresh keys, each
// blocked by a hold of b: a Lock, and where the Lockers have shared holds a
// permit's Acquire and a write hold's Lock.
func (c *caseT) blockedWaits(ctx context.Context, a, b, d locker.Locker) []*blockedWait {
	c.Helper()
	key := c.key()
	waits := []*blockedWait{{
		what:    "a Lock",
		wait:    func(ctx context.Context, o ...locker.LockOption) (locker.Lock, error) { return a.Lock(ctx, key, o...) },
		blocker: c.mustTryLock(ctx, b, key, "TryLock on a free key must succeed"),
		retake: func(ctx context.Context, o ...locker.LockOption) (locker.Lock, error) {
			return d.TryLock(ctx, key, o...)
		},
	}}
	skey := c.key()
	sb, err := locker.NewSemaphore(b, skey, 1)
	if unshared(err) {
		c.Logf("the Locker has no shared holds; only a Lock waits: %v", err)
		return waits
	}
	if err != nil {
		c.Fatalf("locker.NewSemaphore: %v", err)
	}
	sa, sd := c.semaphore(a, skey, 1), c.semaphore(d, skey, 1)
	p, err := sb.TryAcquire(ctx)
	if err != nil {
		c.Fatalf("%s: TryAcquire on a free semaphore: %v", withinLimit, err)
	}
	rb := c.rwmutex(b, c.key())
	ra, rd := c.rwmutex(a, rb.Key()), c.rwmutex(d, rb.Key())
	r, err := rb.TryRLock(ctx)
	if err != nil {
		c.Fatalf("%s: TryRLock on a free key: %v", readersShare, err)
	}
	return append(waits,
		&blockedWait{what: "a permit's Acquire", wait: sa.Acquire, blocker: p, retake: sd.TryAcquire},
		&blockedWait{what: "a write hold's Lock", wait: ra.Lock, blocker: r, retake: rd.TryLock})
}

// testCloseWhileWaiting cuts a Locker off from the store while its Lock
// (and, with shared holds, its Acquire and its write Lock) wait for keys
// another Locker holds, and closes it.
func testCloseWhileWaiting(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(7))
	a, b, d := c.newLocker(), c.newLocker(), c.newLocker()
	waits := c.blockedWaits(ctx, a, b, d)
	for _, w := range waits {
		w.res = make(chan lockResult, 1)
		go func() {
			lk, err := w.wait(ctx)
			w.at = time.Now()
			w.res <- lockResult{lk, err}
		}()
	}
	// checkWaiting fails the case for a wait that has returned.
	checkWaiting := func(when string) {
		c.Helper()
		for _, w := range waits {
			select {
			case r := <-w.res:
				if r.err == nil {
					_ = r.lk.Unlock(ctx)
					c.Fatalf("%s: %s returned a hold (token %d) %s, while another Locker held what it waits for", exclusive, w.what, r.lk.Token(), when)
				}
				c.Fatalf("%s must wait while another Locker holds what it waits for, %s: %v", w.what, when, r.err)
			default:
			}
		}
	}
	sleep(ctx, c.pause())
	checkWaiting("before the cut")
	heal := c.isolate(a)
	// The waits run into the cut: their store calls and reads hang or fail.
	sleep(ctx, c.pause())
	checkWaiting("after the cut")

	start, dctx, cancel := c.closeCutOff(ctx, a, closeWaiting)
	defer cancel()
	bound := c.within(2)
	for _, w := range waits {
		r, ok := recvBy(dctx, w.res)
		if !ok {
			c.Errorf("%s: %s was still waiting %v after Close was called", closeWaiting, w.what, bound)
			continue
		}
		c.Logf("%s returned %v after Close was called: %v", w.what, w.at.Sub(start).Round(time.Millisecond), r.err)
		switch {
		case r.err == nil:
			c.Errorf("%s: %s of the closed Locker returned a hold (token %d) while another Locker held what it waits for", exclusive, w.what, r.lk.Token())
			_ = r.lk.Unlock(ctx)
		case !errors.Is(r.err, locker.ErrClosed):
			c.Errorf("%s: %s got %v", closeWaiting, w.what, r.err)
		}
	}
	heal()

	for _, w := range waits {
		c.unlock(ctx, w.blocker, heldUntil)
	}
	within := c.within(1)
	for _, w := range waits {
		pctx, cancel := context.WithTimeout(ctx, within)
		lk, err := pollTry(pctx, c.every(), w.retake)
		cancel()
		if err != nil {
			c.Errorf("%s: what %s of the closed Locker waited for was not free for a third Locker within %v of its holder's Unlock: %v", closedWaits, w.what, within, err)
			continue
		}
		c.unlock(ctx, lk, heldUntil)
	}
}

// closeCutOff closes l, a Locker cut off from the store, and fails the
// case under contract unless Close returns within 2 TTLs (c.within(2)). It
// returns when Close was called and a ctx that ends at that bound, for the
// calls that Close must end by then.
func (c *caseT) closeCutOff(ctx context.Context, l locker.Locker, contract string) (time.Time, context.Context, context.CancelFunc) {
	c.Helper()
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- l.Close() }()
	bound := c.within(2)
	dctx, cancel := context.WithDeadline(ctx, start.Add(bound))
	if err, ok := recvBy(dctx, closed); ok {
		c.Logf("Close of the cut-off Locker returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	} else {
		c.Errorf("%s: Close still running %v after it was called", contract, bound)
	}
	return start, dctx, cancel
}

// recvBy receives from ch until ctx ends; a value sent by then is received
// even when ctx ended too.
func recvBy[T any](ctx context.Context, ch <-chan T) (T, bool) {
	select {
	case v := <-ch:
		return v, true
	case <-ctx.Done():
		select {
		case v := <-ch:
			return v, true
		default:
			var zero T
			return zero, false
		}
	}
}
