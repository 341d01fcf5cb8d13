package conformance

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/golocker/locker"
)

// The case of this file is LateDelivery for shared holds: waits for a
// permit and for a read hold are cancelled while their Locker is cut off,
// and the store sees their requests only after the holders' Unlock. A
// request that arrives then finds room for it.

// noLatePermit is the contract of SharedLateDelivery.
const noLatePermit = "a wait for a permit or a read hold cancelled while its Locker was cut off must leave no holder, even when its requests reach the store after the holders' Unlock (every permit free within TTL/2 of the heal, and free from then on)"

// lateTarget is a key of SharedLateDelivery: held whole by one Locker,
// waited for by the cut-off one.
type lateTarget struct {
	what  string
	key   string
	held  locker.Lock
	wait  func(context.Context, ...locker.LockOption) (locker.Lock, error)    // through the cut-off Locker
	whole [2]func(context.Context, ...locker.LockOption) (locker.Lock, error) // every permit, or the write hold
}

func testSharedLateDelivery(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(8))
	const keys, waits, limit = 2, 3, 2 // semaphores and read-write locks; waits per key
	a, w, b := c.newLocker(), c.newLocker(), c.newLocker()
	var targets []lateTarget
	for range keys {
		key := c.key()
		sa, sw, sb := c.semaphore(a, key, limit), c.semaphore(w, key, limit), c.semaphore(b, key, limit)
		held, err := sa.TryAcquireN(ctx, limit)
		if err != nil {
			c.Fatalf("%s: TryAcquireN(%d) on a free semaphore of %d: %v", withinLimit, limit, limit, err)
		}
		all := func(s *locker.Semaphore) func(context.Context, ...locker.LockOption) (locker.Lock, error) {
			return func(ctx context.Context, opts ...locker.LockOption) (locker.Lock, error) {
				return s.TryAcquireN(ctx, limit, opts...)
			}
		}
		targets = append(targets, lateTarget{what: "every permit of " + short(key), key: key, held: held, wait: sw.Acquire, whole: [2]func(context.Context, ...locker.LockOption) (locker.Lock, error){all(sb), all(sw)}})
	}
	for range keys {
		key := c.key()
		ma, mw, mb := c.rwmutex(a, key), c.rwmutex(w, key), c.rwmutex(b, key)
		held, err := ma.TryLock(ctx)
		if err != nil {
			c.Fatalf("%s: the write hold of a free key: %v", readersShare, err)
		}
		targets = append(targets, lateTarget{what: "the write hold of " + short(key), key: key, held: held, wait: mw.RLock, whole: [2]func(context.Context, ...locker.LockOption) (locker.Lock, error){mb.TryLock, mw.TryLock}})
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan lockResult, len(targets)*waits)
	for _, tg := range targets {
		for range waits {
			go func() {
				lk, err := tg.wait(wctx)
				results <- lockResult{lk, err}
			}()
		}
	}
	sleep(ctx, c.pause())
	heal := c.isolate(w)
	// The waiters send their next requests into the cut, and give up.
	sleep(ctx, 2*c.pause())
	cancel()
	for range len(targets) * waits {
		select {
		case r := <-results:
			if r.err == nil {
				c.Errorf("%s: a wait got a hold of %s (token %d) while another Locker held the key whole", withinLimit, short(r.lk.Key()), r.lk.Token())
				_ = r.lk.Unlock(context.WithoutCancel(ctx))
			}
		case <-ctx.Done():
			c.Fatalf("a wait for a shared hold whose ctx was cancelled while cut off from the store must return: still waiting when the case ended")
		}
	}
	// The keys are free in the store before the waiters' requests reach it.
	for _, tg := range targets {
		c.unlock(ctx, tg.held, heldUntil)
	}
	heal()
	healed := time.Now()
	for _, tg := range targets {
		lk := c.freeAfterHeal(ctx, healed, noLatePermit, tg.what, tg.whole[0], func() string { return storeSays(ctx, b, tg.key) })
		c.unlock(ctx, lk, heldUntil)
	}
	c.Logf("every key was free whole for another Locker %v after the heal", time.Since(healed).Round(time.Millisecond))
	// From TTL/2 after the heal on, every try must get every key whole.
	sleep(ctx, time.Until(healed.Add(c.h.TTL/2)))
	for i, start := 0, time.Now(); time.Since(start) < max(c.h.TTL, 500*time.Millisecond); i++ {
		for _, tg := range targets {
			lk, err := tg.whole[i%2](ctx)
			if err != nil {
				c.Fatalf("%s: %s %v after the heal: %v (%s)", noLatePermit, tg.what, time.Since(healed).Round(time.Millisecond), err, storeSays(ctx, b, tg.key))
			}
			c.unlock(ctx, lk, heldUntil)
		}
		if !sleep(ctx, c.every()) {
			c.Fatalf("%s: the case ran out of time: %v", noLatePermit, ctx.Err())
		}
	}
}

// freedLate is in the text of a failure whose key was free only after the
// window the contract gives it: a store slow to answer, as on a loaded
// machine, does that, and Run runs the case again (attempts). A Locker
// that leaves a holder behind fails every attempt: most never free the
// key, and one whose late holder merely expires frees it a TTL after the
// heal, past the window in every attempt.
const freedLate = "free only later"

// freeAfterHeal returns the hold try gets, which the contract wants
// within TTL/2 of healed. When try has not succeeded by then, it fails
// the case: naming freedLate if a try succeeds within two TTLs of the
// heal, with what says tells of the store when the window ended.
func (c *caseT) freeAfterHeal(ctx context.Context, healed time.Time, contract, what string, try func(context.Context, ...locker.LockOption) (locker.Lock, error), says func() string) locker.Lock {
	c.Helper()
	lk, err := c.soonTry(ctx, refused, try, healed, c.h.TTL/2)
	if err == nil {
		return lk
	}
	missed := time.Since(healed).Round(time.Millisecond)
	state := says()
	later, lerr := c.soonTry(ctx, refused, try, healed, 2*c.h.TTL)
	if lerr != nil {
		c.Fatalf("%s: %s %v after the heal: %v (%s); still not free two TTLs after the heal: %v", contract, what, missed, err, state, lerr)
	}
	free := time.Since(healed).Round(time.Millisecond)
	c.unlock(ctx, later, heldUntil)
	c.Fatalf("%s: %s %v after the heal: %v (%s); %s, %v after the heal", contract, what, missed, err, state, freedLate, free)
	return nil
}

// storeSays describes who holds key and how many wait for it, as
// locker.Inspect through l tells it, for a failure's message: a late
// grant shows as a holder whose expiry is about a TTL after the heal, a
// late request in line as a waiter.
func storeSays(ctx context.Context, l locker.Locker, key string) string {
	st, err := locker.Inspect(ctx, l, key)
	if err != nil {
		return "Inspect: " + err.Error()
	}
	if !st.Held && st.Waiters == 0 {
		return "Inspect finds the key free and nobody waiting"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Inspect finds %d waiting", st.Waiters)
	holders := st.Holders
	if holders == nil && st.Held {
		holders = []locker.Holder{{Token: st.Token, Label: st.Label, Acquired: st.Acquired, Expires: st.Expires}}
	}
	for _, h := range holders {
		fmt.Fprintf(&b, "; a holder with token %d, weight %d, label %q", h.Token, h.Weight, h.Label)
		if !h.Acquired.IsZero() {
			fmt.Fprintf(&b, ", acquired %v ago", time.Since(h.Acquired).Round(time.Millisecond))
		}
		if !h.Expires.IsZero() {
			fmt.Fprintf(&b, ", expiring in %v", time.Until(h.Expires).Round(time.Millisecond))
		}
	}
	return b.String()
}
