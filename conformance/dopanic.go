package conformance

import (
	"context"

	"github.com/golocker/locker"
)

// doPanicValue is what the function of DoPanic panics with: a pointer, so
// that only the very value compares equal.
type doPanicValue struct{ call string }

func (v *doPanicValue) String() string { return "conformance: panic in " + v.call + "'s function" }

// testDoPanic: when the function of Do or TryDo panics and the caller
// recovers (net/http does, for every handler), the panic reaches the caller
// with its own value and the key is free for another Locker within one
// release timeout.
func testDoPanic(c *caseT) {
	contract := c.contract
	wait := locker.DefaultReleaseTimeout + c.slack
	ctx := c.ctx(c.within(1) + 2*wait)
	key := c.key()
	a, b := c.newLocker(), c.newLocker()
	for _, call := range []struct {
		name string
		do   func(context.Context, locker.Locker, string, func(context.Context) error, ...locker.LockOption) error
	}{{"Do", locker.Do}, {"TryDo", locker.TryDo}} {
		want := &doPanicValue{call: call.name}
		ran := false
		got := recovered(func() {
			_ = call.do(ctx, a, key, func(context.Context) error {
				ran = true
				panic(want)
			})
		})
		if !ran {
			c.Fatalf("%s: %s on a free key %s did not run its function", contract, call.name, short(key))
		}
		if got != want {
			c.Errorf("%s: the caller of %s recovered %v, want the function's own panic value %v", contract, call.name, got, want)
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		lk, err := pollTryLock(wctx, b, key, c.every())
		cancel()
		if err != nil {
			c.Fatalf("%s: after %s's function panicked and its caller recovered, another Locker could not get %s within %v: %v", contract, call.name, short(key), wait, err)
		}
		c.unlock(ctx, lk, contract)
	}
}

// recovered runs f and returns the value of its panic, or nil.
func recovered(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}
