package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golocker/locker"
)

// testRWExclusion checks that readers of three Lockers share the key,
// that a writer excludes readers and writers, and then races readers and
// writers, counting who holds the key at once.
func testRWExclusion(c *caseT) {
	ctx := c.ctx(10*c.h.TTL + 12*c.slack)
	key := c.key()
	a, b, d := c.newLocker(), c.newLocker(), c.newLocker()
	ma, mb, md := c.rwmutex(a, key), c.rwmutex(b, key), c.rwmutex(d, key)

	r1, err := ma.TryRLock(ctx)
	if err != nil {
		c.Fatalf("%s: TryRLock on a free key: %v", readersShare, err)
	}
	r2, err := mb.TryRLock(ctx)
	if err != nil {
		c.Fatalf("%s: TryRLock from another Locker beside a reader: %v", readersShare, err)
	}
	if w, err := md.TryLock(ctx); err == nil {
		_ = w.Unlock(ctx)
		c.Errorf("%s: TryLock got the write hold (token %d) while two readers held the key", readersShare, w.Token())
	} else if !errors.Is(err, locker.ErrNotAcquired) {
		c.Errorf("%s: TryLock while readers hold: got %v, want an error matching ErrNotAcquired", readersShare, err)
	}
	c.unlock(ctx, r1, heldUntil)
	c.unlock(ctx, r2, heldUntil)
	w, err := md.TryLock(ctx)
	if err != nil {
		c.Fatalf("%s: TryLock once the readers left: %v", readersShare, err)
	}
	for name, try := range map[string]func(context.Context, ...locker.LockOption) (locker.Lock, error){
		"TryRLock": ma.TryRLock, "TryLock": mb.TryLock,
	} {
		if lk, err := try(ctx); err == nil {
			_ = lk.Unlock(ctx)
			c.Errorf("%s: %s from another Locker succeeded (token %d) while a writer held the key", readersShare, name, lk.Token())
		}
	}
	c.unlock(ctx, w, heldUntil)

	const goroutines, rounds = 4, 8
	var (
		readers, writers atomic.Int32
		overlaps         atomic.Int64
		errs             errList
		wg               sync.WaitGroup
	)
	for _, m := range []*locker.RWMutex{ma, mb, md} {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					write := (g+r)%3 == 0
					var lk locker.Lock
					var err error
					if write {
						lk, err = m.Lock(ctx)
					} else {
						lk, err = m.RLock(ctx)
					}
					if err != nil {
						errs.add(fmt.Errorf("write %v: %w", write, err))
						return
					}
					if write {
						if writers.Add(1) != 1 || readers.Load() != 0 {
							overlaps.Add(1)
						}
					} else if readers.Add(1); writers.Load() != 0 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond)
					if write {
						writers.Add(-1)
					} else {
						readers.Add(-1)
					}
					if err := lk.Unlock(ctx); err != nil {
						errs.add(fmt.Errorf("Unlock: %w", err))
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	errs.report(c, "RLock, Lock and Unlock of a contended read-write lock must succeed")
	if n := overlaps.Load(); n > 0 {
		c.Errorf("%s: a writer held the key beside another holder %d times", readersShare, n)
	}
}

// testRWWriterFirst keeps readers of four Lockers coming, so that the key
// always has a reader, and checks that a writer waiting on a fifth gets
// it.
func testRWWriterFirst(c *caseT) {
	ctx := c.ctx(c.within(4))
	key := c.key()
	hold := c.pause()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg    sync.WaitGroup
		errs  errList
		reads atomic.Int64
	)
	for i := range 4 {
		m := c.rwmutex(c.newLocker(), key)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sleep(rctx, time.Duration(i)*hold/4) // staggered: a reader always holds
			for rctx.Err() == nil {
				r, err := m.RLock(rctx)
				if err != nil {
					if rctx.Err() == nil {
						errs.add(err)
					}
					return
				}
				reads.Add(1)
				sleep(rctx, hold)
				if err := r.Unlock(context.WithoutCancel(rctx)); err != nil {
					errs.add(err)
				}
			}
		}()
	}
	sleep(ctx, 2*hold)
	wctx, cancel := context.WithTimeout(ctx, c.within(2))
	w, err := c.rwmutex(c.newLocker(), key).Lock(wctx)
	cancel()
	stop()
	wg.Wait()
	if err != nil {
		c.Fatalf("%s: Lock still waited after %v, while readers took the key %d times: %v", writerNotLast, c.within(2), reads.Load(), err)
	}
	c.unlock(ctx, w, heldUntil)
	errs.report(c, "RLock and Unlock beside a waiting writer must succeed")
}
