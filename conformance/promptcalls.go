package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/golocker/locker"
)

// The case of this file checks PromptCancel's contract for the calls
// besides Lock, TryLock and Unlock, with a ctx cancelled (no deadline a
// client could turn into a read deadline).

// promptCalls is the contract of PromptCancelCalls.
const promptCalls = "an Inspect, List, Extend or SetData whose ctx is cancelled must return promptly even while its Locker is cut off from the store (the first calls of a fresh Locker included)"

// promptCall is one call of PromptCancelCalls and how it ended.
type promptCall struct {
	what string
	at   time.Time // when it returned
	err  error
}

func testPromptCancelCalls(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(4))
	key := c.key()
	// w has talked to the store; f never has.
	w, f := c.newLocker(), c.newLocker()
	lk := c.mustTryLock(ctx, w, key, "TryLock on a free key must succeed")
	if _, err := locker.Inspect(ctx, w, key); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		c.Fatalf("Inspect of a held key before the cut: %v", err)
	}
	heals := []func(){c.isolate(w), c.isolate(f)}

	calls := map[string]func(ctx context.Context) error{
		"Inspect on w": func(ctx context.Context) error { _, err := locker.Inspect(ctx, w, key); return err },
		"Inspect on fresh f": func(ctx context.Context) error {
			_, err := locker.Inspect(ctx, f, key)
			return err
		},
		"List on w":       func(ctx context.Context) error { return firstListErr(ctx, w, key) },
		"List on fresh f": func(ctx context.Context) error { return firstListErr(ctx, f, key) },
		"Extend":          func(ctx context.Context) error { return locker.Extend(ctx, lk) },
		"SetData":         func(ctx context.Context) error { return locker.SetData(ctx, lk, []byte("cut off")) },
	}
	cctx, cancel := context.WithCancel(ctx)
	var (
		mu   sync.Mutex
		done []promptCall
		wg   sync.WaitGroup
	)
	for what, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := call(cctx)
			pc := promptCall{what: what, at: time.Now(), err: err}
			mu.Lock()
			done = append(done, pc)
			mu.Unlock()
		}()
	}
	time.Sleep(c.pause()) // the calls wait for the store
	cancelAt := time.Now()
	cancel()

	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		c.Fatalf("%s: calls still running when the case ended", promptCalls)
	}
	bound := c.promptLate()
	for _, pc := range done {
		late := pc.at.Sub(cancelAt) // negative when it returned before
		switch {
		case late > bound:
			c.Errorf("%s: %s returned %v after its ctx was cancelled (allowed: %v): %v", promptCalls, pc.what, late.Round(time.Millisecond), bound, pc.err)
		case errors.Is(pc.err, errors.ErrUnsupported):
			c.Logf("%s: unsupported: %v", pc.what, pc.err)
		default:
			c.Logf("%s returned %v after the cancel: %v", pc.what, late.Round(100*time.Microsecond), pc.err)
		}
	}
	for _, heal := range heals {
		heal()
	}
	// The lock may have been lost while cut off: its Unlock's outcome is
	// not this case's business.
	if err := lk.Unlock(ctx); err != nil {
		c.Logf("Unlock after the heal: %v", err)
	}
}

// firstListErr lists l's keys under key and returns the first error.
func firstListErr(ctx context.Context, l locker.Locker, key string) error {
	for _, err := range locker.List(ctx, l, key) {
		if err != nil {
			return err
		}
	}
	return nil
}
