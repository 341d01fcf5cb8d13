package conformance

import (
	"context"
	"sync"

	"github.com/golocker/locker"
)

// testElect: three Lockers campaign with locker.Elect; when the leader's
// Locker crashes, another leads within a few TTLs, only once the crashed
// leader's lock is over (its Done closed), and with a higher token.
func testElect(c *caseT) {
	c.need("Crash", c.h.Crash != nil, "crash a leader")
	contract := c.contract
	ctx := c.ctx(c.within(8))
	key := c.key()

	type term struct {
		replica int
		token   uint64          // 0 when unknown
		done    <-chan struct{} // the term's lock's Done (or, failing that, its ctx's)
		// overlap is set when the previous term's lock was not over yet
		// as this one began.
		overlap bool
	}
	var mu sync.Mutex
	var terms []term
	lockers := []locker.Locker{c.newLocker(), c.newLocker(), c.newLocker()}
	ectx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = locker.Elect(ectx, l, key, func(lctx context.Context) error {
				t := term{replica: i, done: lctx.Done()}
				// The term's own hold, nested in Elect's, where the Locker
				// is reentrant (wrappers are not).
				if lk, err := l.TryLock(lctx, key); err == nil {
					t.token, t.done = lk.Token(), lk.Done()
				}
				mu.Lock()
				if n := len(terms); n > 0 {
					select {
					case <-terms[n-1].done:
					default:
						t.overlap = true
					}
				}
				terms = append(terms, t)
				mu.Unlock()
				<-lctx.Done()
				return nil
			})
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	waitTerm := func(n int) term {
		for {
			mu.Lock()
			if len(terms) >= n {
				t := terms[n-1]
				mu.Unlock()
				return t
			}
			mu.Unlock()
			if !sleep(ctx, c.every()) {
				c.Fatalf("%s: no term %d before the case's deadline", contract, n)
			}
		}
	}
	first := waitTerm(1)
	c.h.Crash(c.t, lockers[first.replica])
	second := waitTerm(2)
	switch {
	case second.replica == first.replica:
		c.Errorf("%s: the crashed replica %d leads again", contract, first.replica)
	case second.overlap:
		c.Errorf("%s: replica %d began to lead while the crashed leader's lock was not over (its Done open)", contract, second.replica)
	case second.token != 0 && second.token <= first.token:
		c.Errorf("%s: the new leader's token %d is not above the crashed leader's %d", contract, second.token, first.token)
	}
}
