package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golocker/locker"
)

// carriesData is the contract of locker.WithData and locker.SetData that
// testData checks.
const carriesData = "a lock taken with WithData carries its data, which Inspect and List report to every Locker; " +
	"SetData changes it while the hold goes on with the same token; data over MaxData is refused; the data is gone once the key is free"

// testData: the data a lock is taken with is what another Locker's
// Inspect and List report, byte for byte (every byte value, MaxData of
// them); data over MaxData is refused; a waiter's data is the key's once
// it is handed the key; a free key has none, nor has a lock taken without
// it. Then SetData changes the data, and removes it, while the lock stays
// held with its token, past renewals; it refuses data over MaxData and
// changes nothing then; after Unlock it fails with ErrNotHeld. Skipped
// for a Locker that refuses WithData because its backend cannot store
// data; the SetData part skips for a Lock whose SetData is unsupported.
func testData(c *caseT) {
	contract := c.contract
	ctx := c.ctx(c.within(6))
	key := c.key()
	a, b := c.newLocker(), c.newLocker()

	// Every byte value, MaxData of them: a store that keeps text, or
	// splits a value at a space, a NUL or a newline, shows here.
	full := make([]byte, locker.MaxData)
	for i := range full {
		full[i] = byte(255 - i%256)
	}
	lk, err := a.TryLock(ctx, key, locker.WithData(full))
	if errors.Is(err, locker.ErrInvalidOption) && strings.Contains(err.Error(), "cannot store data") {
		c.Skipf("the Locker cannot store data: %v", err)
	}
	if err != nil {
		c.Fatalf("%s: TryLock(WithData) of a free key: %v", contract, err)
	}
	c.t.Cleanup(func() { _ = lk.Unlock(context.WithoutCancel(ctx)) })
	if _, err := locker.Inspect(ctx, b, key); errors.Is(err, errors.ErrUnsupported) {
		c.Skipf("the Locker cannot inspect: %v", err)
	}
	c.dataIs(ctx, b, key, lk.Token(), full, "after TryLock(WithData) of every byte value")
	c.listedData(ctx, b, key, lk.Token(), full)

	// Over MaxData: refused, nothing is taken.
	over := bytes.Repeat([]byte{'x'}, locker.MaxData+1)
	other := key + "-over"
	if lk2, err := b.TryLock(ctx, other, locker.WithData(over)); !errors.Is(err, locker.ErrInvalidOption) {
		c.Errorf("%s: TryLock(WithData) of %d bytes = %v; want an error matching ErrInvalidOption", contract, len(over), err)
		if err == nil {
			_ = lk2.Unlock(ctx)
		}
	} else if st, err := locker.Inspect(ctx, b, other); err != nil || st.Held {
		c.Errorf("%s: after a refused TryLock(WithData), Inspect = %+v, %v; want the key free", contract, st, err)
	}

	// A waiter's own data once it is handed the key (through the store's
	// queue where it has one), with a NUL, a newline and spaces.
	waiter := []byte("10.0.0.3:8080\x00\n run 7 \xff")
	res := make(chan lockResult, 1)
	go func() {
		got, err := b.Lock(ctx, key, locker.WithData(waiter))
		res <- lockResult{got, err}
	}()
	time.Sleep(c.pause())
	c.unlock(ctx, lk, contract)
	r := <-res
	if r.err != nil {
		c.Fatalf("%s: Lock(WithData) waiting for the key: %v", contract, r.err)
	}
	c.dataIs(ctx, a, key, r.lk.Token(), waiter, "held by a waiter that took it with WithData")
	c.unlock(ctx, r.lk, contract)

	// A free key has no data, nor has the next holder without WithData.
	for {
		st, err := locker.Inspect(ctx, a, key)
		if err == nil && !st.Held {
			if st.Data != nil {
				c.Errorf("%s: Inspect of the free key reports data %s", contract, showData(st.Data))
			}
			break
		}
		if !sleep(ctx, c.every()) {
			c.Fatalf("%s: the key still shows held after Unlock: %+v, %v", contract, st, err)
		}
	}
	plain := c.mustTryLock(ctx, a, key, contract)
	c.dataIs(ctx, b, key, plain.Token(), nil, "held again without WithData")
	c.unlock(ctx, plain, contract)

	// Nor has a key that TryLockMulti takes after a holder with data: a
	// store's one-operation take of several keys must clear it too.
	again, err := a.TryLock(ctx, key, locker.WithData(waiter))
	if err != nil {
		c.Fatalf("%s: TryLock(WithData) of a free key: %v", contract, err)
	}
	c.unlock(ctx, again, contract)
	// The keys just unlocked may still show held to a store that releases
	// in the background.
	ml, err := pollWhile(ctx, c.every(), refused, func(ctx context.Context) (*locker.MultiLock, error) {
		return locker.TryLockMulti(ctx, a, []string{key, key + "-multi"})
	})
	if err != nil {
		c.Fatalf("%s: TryLockMulti of free keys: %v", contract, err)
	}
	c.dataIs(ctx, b, key, ml.Token(key), nil, "held by a TryLockMulti without WithData")
	if err := ml.Unlock(ctx); err != nil {
		c.Errorf("%s: Unlock of the TryLockMulti: %v", contract, err)
	}

	c.setData(ctx, a, b, key+"-set")
}

// setData is testData's SetData part, on key.
func (c *caseT) setData(ctx context.Context, a, b locker.Locker, key string) {
	contract := c.contract
	first := []byte("10.0.0.1:8080")
	lk, err := a.TryLock(ctx, key, locker.WithData(first))
	if err != nil {
		c.Fatalf("%s: TryLock(WithData) of a free key: %v", contract, err)
	}
	c.t.Cleanup(func() { _ = lk.Unlock(context.WithoutCancel(ctx)) })
	tok := lk.Token() // SetData must keep it
	changed := make([]byte, locker.MaxData)
	for i := range changed {
		changed[i] = byte(i % 256)
	}
	if err := locker.SetData(ctx, lk, changed); errors.Is(err, errors.ErrUnsupported) {
		c.Skipf("the Lock cannot change a held lock's data: %v", err)
	} else if err != nil {
		c.Fatalf("%s: SetData of %d bytes: %v", contract, len(changed), err)
	}
	if !c.held(lk, contract) {
		return
	}
	if lk.Token() != tok {
		c.Errorf("%s: the lock's token went from %d to %d with SetData", contract, tok, lk.Token())
	}
	c.dataIs(ctx, b, key, tok, changed, "after SetData of every byte value")
	c.refusedWhileHeld(ctx, b, lk, contract+" (the hold goes on after SetData)")

	// Over MaxData: refused, nothing changes.
	over := bytes.Repeat([]byte{'x'}, locker.MaxData+1)
	if err := locker.SetData(ctx, lk, over); !errors.Is(err, locker.ErrInvalidOption) {
		c.Errorf("%s: SetData of %d bytes = %v; want an error matching ErrInvalidOption", contract, len(over), err)
	}
	c.dataIs(ctx, b, key, tok, changed, "after a refused SetData")

	// Removed, then set again; renewals keep it.
	if err := locker.SetData(ctx, lk, nil); err != nil {
		c.Fatalf("%s: SetData(nil): %v", contract, err)
	}
	c.dataIs(ctx, b, key, tok, nil, "after SetData(nil)")
	second := []byte("10.0.0.2:8080 run 7")
	if err := locker.SetData(ctx, lk, second); err != nil {
		c.Fatalf("%s: SetData: %v", contract, err)
	}
	if !sleep(ctx, c.h.TTL+c.h.TTL/2) || !c.held(lk, contract) {
		return
	}
	c.dataIs(ctx, b, key, tok, second, "a TTL and a half after SetData (renewed meanwhile)")
	c.listedData(ctx, b, key, tok, second)

	c.unlock(ctx, lk, contract)
	if err := locker.SetData(ctx, lk, first); !errors.Is(err, locker.ErrNotHeld) {
		c.Errorf("%s: SetData after Unlock = %v; want an error matching ErrNotHeld", contract, err)
	}
	if st, err := locker.Inspect(ctx, b, key); err == nil && st.Held && st.Token == tok {
		c.Errorf("%s: the key still shows held by the unlocked lock after a SetData that followed the Unlock", contract)
	}
}

// dataIs checks that Inspect from l reports key held with token tok and
// the data want.
func (c *caseT) dataIs(ctx context.Context, l locker.Locker, key string, tok uint64, want []byte, when string) {
	c.Helper()
	st, err := locker.Inspect(ctx, l, key)
	switch {
	case err != nil:
		c.Errorf("%s: Inspect %s: %v", c.contract, when, err)
	case !st.Held || st.Token != tok:
		c.Errorf("%s: Inspect %s = held %v, token %d; want held by the lock's token %d", c.contract, when, st.Held, st.Token, tok)
	case !bytes.Equal(st.Data, want):
		c.Errorf("%s: Inspect %s reports data %s; want %s", c.contract, when, showData(st.Data), showData(want))
	}
}

// listedData checks that List from l reports key with token tok and the
// data want.
func (c *caseT) listedData(ctx context.Context, l locker.Locker, key string, tok uint64, want []byte) {
	c.Helper()
	found := false
	for ks, err := range locker.List(ctx, l, key) {
		if errors.Is(err, errors.ErrUnsupported) {
			c.Logf("the Locker cannot list: %v", err)
			return
		}
		if err != nil {
			c.Errorf("%s: List: %v", c.contract, err)
			return
		}
		if ks.Key != key {
			continue
		}
		found = true
		if ks.Token != tok || !bytes.Equal(ks.Data, want) {
			c.Errorf("%s: List reports token %d, data %s; want token %d, data %s", c.contract, ks.Token, showData(ks.Data), tok, showData(want))
		}
	}
	if !found {
		c.Errorf("%s: List did not yield the held key %s", c.contract, short(key))
	}
}

// showData is data for a failure message: short data quoted, long data
// by its length and first bytes.
func showData(d []byte) string {
	if d == nil {
		return "none"
	}
	if len(d) <= 32 {
		return fmt.Sprintf("%q", d)
	}
	return fmt.Sprintf("%d bytes beginning %q", len(d), d[:16])
}
