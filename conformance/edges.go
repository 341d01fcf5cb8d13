package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/golocker/locker"
)

// The cases of this file check the promises at their edges: contexts that
// outlive Do or are nil, Close while cut off from the store, Unlock racing a
// renewal or called with an ended ctx, and bad options.

// Contracts, quoted by the failure messages.
const (
	staleCtx     = "a ctx kept past Do's return must confer nothing: Lock, TryLock, Do and TryDo through it must not hold the key while another Locker does"
	endedUnlock  = "Unlock with an ended or nil ctx must still release the lock, promptly (well within one TTL)"
	noFalseLoss  = "a lock released by a successful Unlock (or Do) must never be reported lost: Err must stay nil"
	nilCtx       = "a nil ctx must give an error matching ErrInvalidOption, never a panic, and grant nothing"
	badPrefix    = "a prefix that is not valid UTF-8, does not end with a separator (\"/\" or \":\"), or leaves no room for a key within the backend's key limit, must be refused by the constructor with an error matching ErrInvalidOption that names the problem"
	closeIsolate = "Close of a holder cut off from the store must close its locks' Done before anyone else can get the key, and return within a bounded time"
)

func testStaleDoContext(c *caseT) {
	ctx := c.ctx(c.within(4))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	var kept context.Context
	if err := locker.Do(ctx, a, key, func(fctx context.Context) error {
		kept = fctx
		return nil
	}); err != nil {
		c.Fatalf("Do on a free key must run its function and return its nil: %v", err)
	}
	lb := c.mustTryLock(ctx, b, key, "Do must release the key when its function returned")
	defer c.unlock(ctx, lb, heldUntil)

	// got reports a hold obtained through a stale ctx and releases it.
	got := func(what string, lk locker.Lock, err error) {
		c.Helper()
		if err == nil {
			c.Errorf("%s: %s returned a hold (token %d; the holder has %d)", staleCtx, what, lk.Token(), lb.Token())
			_ = lk.Unlock(context.WithoutCancel(ctx))
		}
	}
	for name, kctx := range map[string]context.Context{
		"the ctx Do passed": kept,
		"a ctx derived from it that is not cancelled, bounded": nil,
	} {
		if kctx == nil {
			w, cancel := context.WithTimeout(context.WithoutCancel(kept), 50*time.Millisecond)
			defer cancel()
			kctx = w
		}
		lk, err := a.Lock(kctx, key)
		got("Lock through "+name, lk, err)
		if err != nil && !errors.Is(err, locker.ErrNotAcquired) {
			c.Errorf("%s: Lock through %s: got %v, want an error matching ErrNotAcquired", staleCtx, name, err)
		}
		lk, err = a.TryLock(kctx, key)
		got("TryLock through "+name, lk, err)
		ran := false
		fn := func(context.Context) error { ran = true; return nil }
		derr := locker.Do(kctx, a, key, fn)
		terr := locker.TryDo(kctx, a, key, fn)
		if ran || derr == nil || terr == nil {
			c.Errorf("%s: Do and TryDo through %s ran their function (%v) or returned nil: %v, %v", staleCtx, name, ran, derr, terr)
		}
	}
	c.held(lb, staleCtx+" (the other Locker's lock)")
	c.refused(ctx, a, key, staleCtx+" (the other Locker must still hold the key)")
}

func testCloseWhileIsolated(c *caseT) {
	c.need("Isolate", c.h.Isolate != nil, "cut a Locker off from the store")
	ctx := c.ctx(c.within(6))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
	var doneAt time.Time // monotonic
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-la.Done():
			doneAt = time.Now()
		case <-ctx.Done():
		}
	}()
	healOnce := c.isolate(a)

	type closeResult struct {
		err  error
		took time.Duration
	}
	closed := make(chan closeResult, 1)
	go func() {
		start := time.Now()
		err := a.Close()
		closed <- closeResult{err, time.Since(start)}
	}()

	var bAt time.Time
	for bAt.IsZero() {
		lk, err := b.TryLock(ctx, key)
		switch {
		case err == nil:
			bAt = time.Now() // the grant happened before this
			defer c.unlock(ctx, lk, heldUntil)
		case ctx.Err() != nil:
			c.Fatalf("%s: the closed holder's key never became free for another Locker: %v", closeIsolate, err)
		case !errors.Is(err, locker.ErrNotAcquired):
			c.Fatalf("TryLock from a Locker that still reaches the store: %v", err)
		default:
			sleep(ctx, c.every())
		}
	}
	<-watched
	switch {
	case doneAt.IsZero():
		c.Errorf("%s: Done still open when the case ended; another Locker got the key", closeIsolate)
	case doneAt.After(bAt):
		c.Errorf("%s: Done closed %v after another Locker already had the key", closeIsolate, doneAt.Sub(bAt).Round(time.Millisecond))
	}
	if err := la.Err(); !errors.Is(err, locker.ErrLost) {
		c.Errorf("%s: the closed holder's Err = %v, want an error matching ErrLost", closeIsolate, err)
	}
	bound := c.within(2)
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case r := <-closed:
		c.Logf("Close of the cut-off holder returned after %v: %v", r.took.Round(time.Millisecond), r.err)
	case <-t.C:
		c.Errorf("%s: Close still running %v after another Locker got the key", closeIsolate, bound)
	}
	healOnce()
}

func testUnlockRacingRenewal(c *caseT) {
	const lockers, goroutines, cycles = 2, 8, 4
	ctx := c.ctx(c.within(2*cycles) + c.slack)
	var errs errList
	var wg sync.WaitGroup
	for range lockers {
		l := c.newLocker()
		for g := range goroutines {
			key := c.key()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range cycles {
					// Hold for about one renewal interval, spread around
					// it, so that releases land on renewal rounds.
					hold := c.h.TTL/3 + time.Duration((g*cycles+i)%9-4)*c.h.TTL/48
					if i%2 == 0 {
						lk, err := l.Lock(ctx, key)
						if err != nil {
							errs.add(fmt.Errorf("Lock: %w", err))
							return
						}
						sleep(ctx, hold)
						if err := lk.Unlock(ctx); err != nil {
							errs.add(fmt.Errorf("Unlock of a lock held for %v: %w", hold, err))
							return
						}
						if err := lk.Err(); err != nil {
							errs.add(fmt.Errorf("after a nil Unlock, Err = %w", err))
						}
						continue
					}
					err := locker.Do(ctx, l, key, func(fctx context.Context) error {
						sleep(fctx, hold)
						return context.Cause(fctx)
					})
					if err != nil {
						errs.add(fmt.Errorf("Do holding for %v returned %w", hold, err))
					}
				}
			}()
		}
	}
	wg.Wait()
	errs.report(c, noFalseLoss)
}

func testUnlockEndedContext(c *caseT) {
	ctx := c.ctx(c.within(3))
	a, b := c.newLocker(), c.newLocker()

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	for _, u := range []struct {
		name string
		ctx  context.Context
	}{{"a cancelled ctx", cancelled}, {"an expired ctx", expired}, {"a nil ctx", nil}} {
		key := c.key()
		la := c.mustTryLock(ctx, a, key, "TryLock on a free key must succeed")
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
					c.Errorf("%s: Unlock with %s panicked: %v", endedUnlock, u.name, p)
				}
			}()
			err = la.Unlock(u.ctx)
		}()
		c.Logf("Unlock with %s returned %v", u.name, err)
		c.doneClosed(la, "Done must be closed once Unlock returned, whatever the outcome")
		// Well within one TTL: an Unlock that leaves the key to expire
		// fails this.
		lb, perr := c.soonTryLock(ctx, b, key, time.Now(), c.h.TTL/2)
		if perr != nil {
			c.Errorf("%s: after Unlock with %s, another Locker's TryLock: %v", endedUnlock, u.name, perr)
			continue
		}
		c.unlock(ctx, lb, heldUntil)
	}
}

func testNilContext(c *caseT) {
	ctx := c.ctx(c.within(2))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	var nilCtxV context.Context
	for what, f := range map[string]func() error{
		"Lock": func() error { lk, err := a.Lock(nilCtxV, key); releaseIf(ctx, lk, err); return errOrGranted(lk, err) },
		"TryLock": func() error {
			lk, err := a.TryLock(nilCtxV, key)
			releaseIf(ctx, lk, err)
			return errOrGranted(lk, err)
		},
		"Do":    func() error { return locker.Do(nilCtxV, a, key, fn) },
		"TryDo": func() error { return locker.TryDo(nilCtxV, a, key, fn) },
	} {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			return f()
		}()
		if !errors.Is(err, locker.ErrInvalidOption) {
			c.Errorf("%s: %s(nil, …) = %v", nilCtx, what, err)
		}
	}
	if ran {
		c.Errorf("%s: Do or TryDo ran its function", nilCtx)
	}
	lk := c.mustTryLock(ctx, b, key, nilCtx+" (the key must be free afterwards)")
	c.unlock(ctx, lk, heldUntil)
}

// errOrGranted is err, or an error saying a lock was granted.
func errOrGranted(lk locker.Lock, err error) error {
	if err == nil {
		return fmt.Errorf("granted a lock (token %d)", lk.Token())
	}
	return err
}

func testBadPrefix(c *caseT) {
	c.need("NewLockerWith", c.h.NewLockerWith != nil, "build a Locker with extra options")
	type bad struct {
		what, prefix string
		says         []string
	}
	cases := []bad{
		{"a prefix that is not valid UTF-8", "jobs/\xff/", []string{"UTF-8"}},
		{"a prefix without a separator at its end", "tenant1", []string{"tenant1"}},
	}
	if m := c.h.MaxKeyBytes; m > 0 {
		p := strings.Repeat("p", m+4096) + "/"
		cases = append(cases, bad{"a prefix longer than the key limit", p, []string{strconv.Itoa(len(p))}})
	}
	for _, bc := range cases {
		l, err := func() (l locker.Locker, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			return c.h.NewLockerWith(c.t, locker.WithPrefix(bc.prefix))
		}()
		if err == nil {
			c.Errorf("%s: %s was accepted", badPrefix, bc.what)
			_ = l.Close()
			continue
		}
		if !errors.Is(err, locker.ErrInvalidOption) {
			c.Errorf("%s: %s: got %v", badPrefix, bc.what, err)
		}
		msg := err.Error()
		for _, s := range bc.says {
			if !strings.Contains(msg, s) {
				c.Errorf("%s: %s: the error %q does not say %q", badPrefix, bc.what, short(msg), s)
			}
		}
		if !utf8.ValidString(msg) || strings.ContainsAny(msg, "\n\r") {
			c.Errorf("%s: %s: the error text must be one line of valid UTF-8: %q", badPrefix, bc.what, short(msg))
		}
	}
}
