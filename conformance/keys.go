package conformance

import (
	"context"
	"errors"
	"fmt"

	"github.com/golocker/locker"
)

func testKeys(c *caseT) {
	// About 6 calls for each of the 17 odd keys below, and those of the
	// empty key and of the longest key.
	ctx := c.ctx(c.forCalls(120))
	a, b, other := c.newLocker(), c.newLocker(), c.newLocker()
	const noPanic = "a Locker must never panic, whatever the key"
	// call runs f and turns a panic into a failure.
	call := func(what string, f func() error) (err error) {
		c.Helper()
		defer func() {
			if p := recover(); p != nil {
				c.Errorf("%s: %s panicked: %v", noPanic, what, p)
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return f()
	}
	tryLock := func(l locker.Locker, key string) (lk locker.Lock, err error) {
		err = call("TryLock("+short(key)+")", func() error {
			lk, err = l.TryLock(ctx, key)
			return err
		})
		return lk, err
	}

	// The empty key.
	const empty = "the empty key must be refused with an error matching ErrInvalidKey"
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	for what, f := range map[string]func() error{
		`Lock("")`:    func() error { lk, err := a.Lock(ctx, ""); releaseIf(ctx, lk, err); return err },
		`TryLock("")`: func() error { lk, err := a.TryLock(ctx, ""); releaseIf(ctx, lk, err); return err },
		`Do("")`:      func() error { return locker.Do(ctx, a, "", fn) },
		`TryDo("")`:   func() error { return locker.TryDo(ctx, a, "", fn) },
	} {
		if err := call(what, f); !errors.Is(err, locker.ErrInvalidKey) {
			c.Errorf("%s: %s = %v", empty, what, err)
		}
	}
	if ran {
		c.Errorf("%s: Do or TryDo ran its function", empty)
	}

	// Odd keys: each either works, as a key of its own, or is refused with
	// ErrInvalidKey. Prefixing them with base keeps them apart from other
	// cases and runs; base itself comes first, so that a backend that
	// confuses a key with its path parent is caught.
	base := c.key()
	long := base + "/"
	for len(long) < 4096 {
		long += "k"
	}
	cands := []string{
		base,
		base + "/a",
		base + "/a/b",
		base + "/a/",
		base + "/a//b",
		base + "/..",
		base + "/a/..",
		base + "/./a",
		base + "/",
		"/" + base,
		base + " with spaces ",
		base + "-ключ-鍵-🔒",
		base + "\x00nul",
		base + "\ttab\nnewline",
		base + "\xffnot-utf8",
		base + "*?[]{}%#'\"\\",
		long,
	}
	if m := c.h.MaxKeyBytes; m > 0 {
		exact := base + "-"
		for len(exact) < m {
			exact += "x"
		}
		exact = exact[:m]
		lk, err := tryLock(a, exact)
		if err != nil {
			c.Errorf("a key of exactly Harness.MaxKeyBytes (%d) bytes must work: %v", m, err)
		} else if err := lk.Unlock(ctx); err != nil {
			c.Errorf("a key of exactly Harness.MaxKeyBytes (%d) bytes must work: Unlock: %v", m, err)
		}
		for what, f := range map[string]func() error{
			"TryLock": func() error { lk, err := a.TryLock(ctx, exact+"x"); releaseIf(ctx, lk, err); return err },
			"Lock":    func() error { lk, err := a.Lock(ctx, exact+"x"); releaseIf(ctx, lk, err); return err },
		} {
			if err := call(what, f); !errors.Is(err, locker.ErrInvalidKey) {
				c.Errorf("a key one byte longer than Harness.MaxKeyBytes (%d) must be refused with ErrInvalidKey: %s = %v", m, what, err)
			}
		}
	}

	// Take every candidate, alternating between two Lockers, and hold them
	// all at once: keys that work must be distinct keys.
	type holding struct {
		key string
		lk  locker.Lock
	}
	var hs []holding
	for i, key := range cands {
		l := a
		if i%2 == 1 {
			l = b
		}
		lk, err := tryLock(l, key)
		if m := c.h.MaxKeyBytes; m > 0 && len(key) > m && !errors.Is(err, locker.ErrInvalidKey) {
			c.Errorf("a key longer than Harness.MaxKeyBytes (%d) must be refused with ErrInvalidKey: TryLock(%s) = %v", m, short(key), err)
			releaseIf(ctx, lk, err)
			continue
		}
		switch {
		case err == nil:
			hs = append(hs, holding{key, lk})
			if lk.Key() != key {
				c.Errorf("Lock.Key must return the key as the caller gave it: got %s, want %s", short(lk.Key()), short(key))
			}
		case errors.Is(err, locker.ErrInvalidKey):
			c.Logf("key %s refused as invalid: %v", short(key), err)
		case errors.Is(err, locker.ErrNotAcquired):
			held := make([]string, len(hs))
			for j, h := range hs {
				held[j] = short(h.key)
			}
			c.Errorf("distinct keys must never block each other: TryLock(%s) was refused while only these other keys were held: %v", short(key), held)
		default:
			c.Errorf("%s: TryLock(%s) = %v", c.contract, short(key), err)
		}
	}
	for _, h := range hs {
		c.refused(ctx, other, h.key, exclusive+", whatever its characters")
	}
	for _, h := range hs {
		if err := call("Unlock", func() error { return h.lk.Unlock(ctx) }); err != nil {
			c.Errorf("Unlock of the held lock on %s: %v", short(h.key), err)
		}
	}
	for _, h := range hs {
		lk, err := tryLock(other, h.key)
		if err != nil {
			c.Errorf("%s: TryLock(%s) from another Locker: %v", freeAfter, short(h.key), err)
			continue
		}
		c.unlock(ctx, lk, heldUntil)
	}
}
