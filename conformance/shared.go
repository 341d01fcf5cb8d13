package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golocker/locker"
)

// Contracts of shared holds, quoted by the failure messages.
const (
	withinLimit    = "a semaphore must never grant more permits than its limit at once"
	sharedFencing  = "every permit and every read or write hold must carry a token strictly greater than every token handed out earlier for the key, whatever its mode"
	readersShare   = "readers must share the key, and a writer must exclude readers and other writers"
	writerNotLast  = "a waiting writer must get the key while readers keep coming"
	sharedNoResidu = "a cancelled wait for a permit or a hold must leave nothing behind"
	noShared       = "has no shared holds"
)

// unshared reports whether err says the Locker has no shared holds (its
// driver is no driver.Sharer).
func unshared(err error) bool {
	return errors.Is(err, locker.ErrInvalidOption) && strings.Contains(err.Error(), noShared)
}

// skipUnshared skips the case when err says the Locker has no shared holds
// (its driver is no driver.Sharer), and fails it for any other error.
func (c *caseT) skipUnshared(what string, err error) {
	c.Helper()
	if unshared(err) {
		c.Skipf("the Locker has no shared holds, so no %s to test: %v", what, err)
	}
	c.Fatalf("%s: %v", what, err)
}

// semaphore returns the semaphore of limit permits on key through l.
func (c *caseT) semaphore(l locker.Locker, key string, limit int) *locker.Semaphore {
	c.Helper()
	s, err := locker.NewSemaphore(l, key, limit)
	if err != nil {
		c.skipUnshared("locker.NewSemaphore", err)
	}
	return s
}

// sharedSemaphore returns the semaphore of limit permits on key through l,
// or nil when the Locker has no shared holds: then the log says that the
// case leaves out what needs one (leftOut).
func (c *caseT) sharedSemaphore(l locker.Locker, key string, limit int, leftOut string) *locker.Semaphore {
	c.Helper()
	s, err := locker.NewSemaphore(l, key, limit)
	switch {
	case err == nil:
		return s
	case unshared(err):
		c.Logf("the Locker has no shared holds: the case leaves out %s: %v", leftOut, err)
		return nil
	}
	c.Fatalf("locker.NewSemaphore: %v", err)
	return nil
}

// rwmutex returns the read-write lock on key through l.
func (c *caseT) rwmutex(l locker.Locker, key string) *locker.RWMutex {
	c.Helper()
	m, err := locker.NewRWMutex(l, key)
	if err != nil {
		c.skipUnshared("locker.NewRWMutex", err)
	}
	return m
}

// pollTry is pollWhile riding out refusals: it calls try until it
// succeeds, fails with an error other than ErrNotAcquired, or ctx ends.
func pollTry(ctx context.Context, every time.Duration, try func(context.Context, ...locker.LockOption) (locker.Lock, error)) (locker.Lock, error) {
	return pollWhile(ctx, every, refused, func(ctx context.Context) (locker.Lock, error) { return try(ctx) })
}

// pollWhile calls try every interval until it succeeds, fails with an
// error that rides does not ride out, or ctx ends. An error once ctx
// ended says that the deadline passed, and wraps try's last error.
func pollWhile[T any](ctx context.Context, every time.Duration, rides func(error) bool, try func(context.Context) (T, error)) (T, error) {
	var zero T
	for {
		got, err := try(ctx)
		if err == nil {
			return got, nil
		}
		if ctx.Err() != nil {
			return zero, fmt.Errorf("still not acquired when the deadline passed: %w", err)
		}
		if !rides(err) {
			return zero, err
		}
		if !sleep(ctx, every) {
			return zero, fmt.Errorf("still not acquired when the deadline passed: %w", err)
		}
	}
}

// refused reports whether err is a refusal, one matching ErrNotAcquired:
// the key was held.
func refused(err error) bool { return errors.Is(err, locker.ErrNotAcquired) }

// notFinal reports whether err may pass as a store comes back: any error
// but ErrClosed and ErrInvalidKey.
func notFinal(err error) bool {
	return !errors.Is(err, locker.ErrClosed) && !errors.Is(err, locker.ErrInvalidKey)
}

// pollSoon is pollTry for soon: the store must grant within soon, having
// answered "held" until then at most. A call that soon ended before the
// store answered (a loaded machine, a busy connection pool) gave no
// answer, so it is made once more, bounded by ctx: an answer decides, not
// the machine's speed.
func pollSoon(ctx context.Context, soon, every time.Duration, try func(context.Context, ...locker.LockOption) (locker.Lock, error)) (locker.Lock, error) {
	sctx, cancel := context.WithTimeout(ctx, soon)
	lk, err := pollTry(sctx, every, try)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return try(ctx)
	}
	return lk, err
}

// testSharedFencing takes permits and read and write holds, some at once,
// from two Lockers, and checks that every grant's token is greater than
// every token handed out before it for the key.
func testSharedFencing(c *caseT) {
	ctx := c.ctx(c.within(3))
	a, b := c.newLocker(), c.newLocker()
	var last uint64
	check := func(what string, lk locker.Lock, err error) locker.Lock {
		c.Helper()
		if err != nil {
			c.Fatalf("%s: %s on a key with room for it: %v", sharedFencing, what, err)
		}
		if lk.Token() <= last {
			c.Errorf("%s: %s got token %d after token %d", sharedFencing, what, lk.Token(), last)
		}
		last = max(last, lk.Token())
		return lk
	}
	release := func(locks ...locker.Lock) {
		for _, lk := range locks {
			c.unlock(ctx, lk, heldUntil)
		}
	}

	sa, sb := c.semaphore(a, c.key(), 3), (*locker.Semaphore)(nil)
	sb = c.semaphore(b, sa.Key(), 3)
	p1, err := sa.TryAcquire(ctx)
	p1 = check("a first permit", p1, err)
	p2, err := sb.TryAcquireN(ctx, 2)
	p2 = check("two more permits", p2, err)
	release(p1)
	p3, err := sa.TryAcquire(ctx)
	p3 = check("a permit given back and taken again", p3, err)
	release(p2, p3)

	last = 0
	ra, rb := c.rwmutex(a, c.key()), (*locker.RWMutex)(nil)
	rb = c.rwmutex(b, ra.Key())
	r1, err := ra.TryRLock(ctx)
	r1 = check("a read hold", r1, err)
	r2, err := rb.TryRLock(ctx)
	r2 = check("a second read hold", r2, err)
	release(r1, r2)
	w1, err := rb.TryLock(ctx)
	w1 = check("a write hold after two readers", w1, err)
	release(w1)
	r3, err := ra.TryRLock(ctx)
	r3 = check("a read hold after a writer", r3, err)
	release(r3)
	w2, err := ra.TryLock(ctx)
	check("a write hold after a reader", w2, err)
	release(w2)
}

// testSharedCancellation cancels waits for a permit and for a write hold
// and checks that they leave nothing behind: readers pass at once once the
// writer's wait ended, and the permit is free at once after its holder's
// Unlock, and stays free.
func testSharedCancellation(c *caseT) {
	ctx := c.ctx(c.within(4))
	a, b, d := c.newLocker(), c.newLocker(), c.newLocker()
	soon := max(c.h.TTL/2, c.every())

	// A writer gives up waiting for a reader: later readers must not
	// queue behind it.
	ra, rb, rd := c.rwmutex(a, c.key()), (*locker.RWMutex)(nil), (*locker.RWMutex)(nil)
	rb, rd = c.rwmutex(b, ra.Key()), c.rwmutex(d, ra.Key())
	r1, err := ra.TryRLock(ctx)
	if err != nil {
		c.Fatalf("%s: TryRLock on a free key: %v", readersShare, err)
	}
	wctx, cancel := context.WithTimeout(ctx, c.pause())
	w, err := rb.Lock(wctx)
	cancel()
	if err == nil {
		c.Fatalf("%s: Lock got the write hold (token %d) while a reader held the key", readersShare, w.Token())
	}
	if !errors.Is(err, locker.ErrNotAcquired) {
		c.Errorf("%s: a write wait whose ctx ended: got %v, want an error matching ErrNotAcquired", sharedNoResidu, err)
	}
	r2, err := pollSoon(ctx, soon, c.every(), rd.TryRLock)
	if err != nil {
		c.Errorf("%s: a reader still could not join the reader within %v after a writer's wait ended: %v", sharedNoResidu, soon, err)
	} else {
		c.unlock(ctx, r2, heldUntil)
	}
	c.unlock(ctx, r1, heldUntil)

	// Waits for the only permit give up: once its holder gives it back,
	// it is free at once, and stays free.
	sa := c.semaphore(a, c.key(), 1)
	sb, sd := c.semaphore(b, sa.Key(), 1), c.semaphore(d, sa.Key(), 1)
	p, err := sa.TryAcquire(ctx)
	if err != nil {
		c.Fatalf("%s: TryAcquire on a free semaphore: %v", withinLimit, err)
	}
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			wctx, cancel := context.WithTimeout(ctx, c.pause()+time.Duration(i)*c.every())
			defer cancel()
			q, err := sb.Acquire(wctx)
			if err == nil {
				_ = q.Unlock(ctx)
				err = fmt.Errorf("Acquire got a permit (token %d) while the only one was held", q.Token())
			} else if errors.Is(err, locker.ErrNotAcquired) {
				err = nil
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			c.Errorf("%s: a wait whose ctx ended: %v", sharedNoResidu, err)
		}
	}
	c.unlock(ctx, p, heldUntil)
	for round := range 2 {
		q, err := pollSoon(ctx, soon, c.every(), sd.TryAcquire)
		if err != nil {
			c.Fatalf("%s: the permit was not free within %v of its holder's Unlock (round %d): %v", sharedNoResidu, soon, round+1, err)
		}
		sleep(ctx, c.pause())
		c.unlock(ctx, q, heldUntil)
		sleep(ctx, c.pause()) // time for a leftover waiter to take it
	}
}
