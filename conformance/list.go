package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golocker/locker"
)

// listHeld is how many keys the List case holds: more than one page of
// locker.List, so that its cursor is used.
const listHeld = locker.ListPage + locker.ListPage/5

// listShared is how many semaphore keys, and as many read-write keys, the
// List case holds besides its plain locks, when the Locker has shared holds.
const listShared = 12

// testList: locker.List yields every key held under a prefix once, with its
// holder's token (and label), and no free key, no key outside the prefix;
// keys taken and released during the listing (between the held ones) never
// make a key held throughout go missing. Keys held by semaphore permits and
// read-write holds are held keys too: each is listed with its holders and
// the newest holder's token. A key whose lock was lost meanwhile (its Err
// set after the listing: renewals starved on a loaded machine) was not held
// throughout, so List may leave it out; the case takes such a key again
// before its next listing.
func testList(c *caseT) {
	const contract = "List yields every held key under the prefix once, with its holder's token"
	// A budget, not a wait: listing about a thousand keys on five Redlock
	// masters beside the churn, under the race detector on a loaded
	// machine, outlasted 6 TTLs and twice the slack (CI, 28 s).
	ctx := c.ctx(c.within(12) + 3*c.slack)
	prefix := c.key() + "-"
	reader := c.newLocker()
	if err := firstErr(locker.List(ctx, reader, prefix)); errors.Is(err, errors.ErrUnsupported) {
		c.Skipf("the Locker cannot list: %v", err)
	} else if err != nil {
		c.Fatalf("%s: List of an empty prefix: %v", contract, err)
	}
	a, label := c.labelled("list-holder")
	b := c.newLocker()
	key := func(i int, kind string) string { return fmt.Sprintf("%s%04d-%s", prefix, i, kind) }

	// Free keys: taken and released, so the store may keep traces of them.
	for i := range 20 {
		lk := c.mustTryLock(ctx, b, key(i*listHeld/20, "free"), contract)
		c.unlock(ctx, lk, contract)
	}
	// Held keys, half by each Locker (a, labelled, the even ones), taken by a few goroutines.
	held := make([]locker.Lock, listHeld)
	var wg sync.WaitGroup
	errs := make(chan error, listHeld)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < listHeld; i += 8 {
				l := a
				if i%2 == 1 {
					l = b
				}
				lk, err := l.TryLock(ctx, key(i, "held"))
				if err != nil {
					errs <- fmt.Errorf("TryLock(%s) on a free key: %w", short(key(i, "held")), err)
					return
				}
				held[i] = lk
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		c.Fatalf("%s: %v", contract, err)
	}
	c.t.Cleanup(func() {
		for _, lk := range held {
			_ = lk.Unlock(context.WithoutCancel(ctx))
		}
	})
	want := make(map[string]int, listHeld) // key -> index in held
	for i, lk := range held {
		want[lk.Key()] = i
	}
	shared := c.listSharedHolds(ctx, a, b, key)

	// retake takes again the held keys whose locks were lost, each with
	// the Locker that held it, so that every listing checks them all.
	retake := func(round string) {
		c.Helper()
		n := 0
		var cause error
		for i, lk := range held {
			err := lk.Err()
			if err == nil {
				continue
			}
			cause = err
			l := a
			if i%2 == 1 {
				l = b
			}
			again, err := l.Lock(ctx, lk.Key())
			if err != nil {
				c.Fatalf("%s: Lock(%s), whose lock was lost (%v): %v", contract, short(lk.Key()), cause, err)
			}
			held[i], n = again, n+1
		}
		if n > 0 {
			c.Logf("%d held keys were lost before the listing (%s), and taken again; the last loss: %v", n, round, cause)
		}
	}
	check := func(round string, onFirst func()) {
		c.Helper()
		retake(round)
		seen := make(map[string]int, listHeld)
		for ks, err := range locker.List(ctx, reader, prefix) {
			if err != nil {
				c.Fatalf("%s: List (%s): %v", contract, round, err)
			}
			if onFirst != nil {
				onFirst()
				onFirst = nil
			}
			seen[ks.Key]++
			switch {
			case !strings.HasPrefix(ks.Key, prefix):
				c.Errorf("%s: List(%q) yielded %q, outside the prefix (%s)", contract, prefix, ks.Key, round)
			case strings.HasSuffix(ks.Key, "-free"):
				c.Errorf("%s: List yielded the free key %s (%s)", contract, short(ks.Key), round)
			case !ks.Held:
				c.Errorf("%s: List yielded %s with Held false (%s)", contract, short(ks.Key), round)
			}
			if seen[ks.Key] == 2 {
				c.Errorf("%s: List yielded %s twice (%s)", contract, short(ks.Key), round)
			}
			if sw, ok := shared[ks.Key]; ok {
				if sw.lost() == nil && (ks.Token != sw.token || len(ks.Holders) != sw.holders) {
					c.Errorf("%s: List gives the shared key %s token %d and %d holders; its newest holder's token is %d, and it has %d holders (%s)",
						contract, short(ks.Key), ks.Token, len(ks.Holders), sw.token, sw.holders, round)
				}
				continue
			}
			i, ok := want[ks.Key]
			if !ok {
				continue // a churned key, which may or may not show
			}
			if ks.Token != held[i].Token() {
				c.Errorf("%s: List gives %s token %d, its holder's is %d (%s)", contract, short(ks.Key), ks.Token, held[i].Token(), round)
			}
			if label != "" && i%2 == 0 && ks.Label != label {
				c.Errorf("%s: List gives %s label %q, its holder's is %q (%s)", contract, short(ks.Key), ks.Label, label, round)
			}
		}
		// Err is set once a lock is lost, and stays: a lock whose Err is
		// nil now was held throughout the listing.
		missing, lost := 0, 0
		var cause error
		for k, i := range want {
			if seen[k] > 0 {
				continue
			}
			if err := held[i].Err(); err != nil {
				lost, cause = lost+1, err
				continue
			}
			if missing++; missing <= 5 {
				c.Errorf("%s: List missed %s, held throughout (%s)", contract, short(k), round)
			}
		}
		if missing > 5 {
			c.Errorf("%s: List missed %d held keys of %d in all (%s)", contract, missing, listHeld, round)
		}
		missing = 0
		for k, sw := range shared {
			if err := sw.lost(); err != nil {
				lost, cause = lost+1, err
				continue
			}
			if seen[k] == 0 {
				if missing++; missing <= 5 {
					c.Errorf("%s: List missed %s, held by shared holds throughout (%s)", contract, short(k), round)
				}
			}
		}
		if missing > 5 {
			c.Errorf("%s: List missed %d keys held by shared holds, of %d in all (%s)", contract, missing, len(shared), round)
		}
		if lost > 0 {
			c.Logf("%d keys were lost by their holders during the listing (%s), so List may leave them out; the last loss: %v", lost, round, cause)
		}
	}
	check("quiet", nil)

	// Keys of the first page released once the listing has begun: a
	// cursor that counts keys instead of naming the last one would skip as
	// many held keys on the next page.
	var early []locker.Lock
	for i := 0; i < locker.ListPage/2; i += 2 {
		early = append(early, c.mustTryLock(ctx, b, key(i, "churn"), contract))
	}
	check("with keys of the first page released after it was read", func() {
		for _, lk := range early {
			c.unlock(ctx, lk, contract)
		}
	})

	// Churn: keys between the held ones taken and released while listing.
	cctx, stop := context.WithCancel(ctx)
	var churn sync.WaitGroup
	for w := range 2 {
		churn.Add(1)
		go func() {
			defer churn.Done()
			for i := w; cctx.Err() == nil; i = (i + 2) % listHeld {
				lk, err := b.TryLock(cctx, key(i, "churn"))
				if err == nil {
					_ = lk.Unlock(context.WithoutCancel(cctx))
				}
				sleep(cctx, time.Millisecond) // churn, not a busy loop that starves the other cases
			}
		}()
	}
	for r := range 3 {
		check(fmt.Sprintf("with keys taken and released meanwhile, round %d", r+1), nil)
	}
	stop()
	churn.Wait()
}

// sharedWant is what List must say of a key held by shared holds.
type sharedWant struct {
	token   uint64 // the newest holder's
	holders int
	holds   []locker.Lock
}

// lost returns the Err of the first of the key's holds that was lost, or
// nil.
func (sw sharedWant) lost() error {
	for _, h := range sw.holds {
		if err := h.Err(); err != nil {
			return err
		}
	}
	return nil
}

// listSharedHolds holds listShared semaphore keys (two permits each, one
// from a and one from b) and listShared read-write keys (one read hold
// each), among the List case's keys, and returns what List must say of
// them. It holds nothing when the Locker has no shared holds.
func (c *caseT) listSharedHolds(ctx context.Context, a, b locker.Locker, key func(int, string) string) map[string]sharedWant {
	const contract = "List yields every key held by shared holds under the prefix once, with its holders"
	want := make(map[string]sharedWant, 2*listShared)
	hold := func(lk locker.Lock, err error) locker.Lock {
		c.Helper()
		if err != nil {
			c.Fatalf("%s: a shared hold on a key with room for it: %v", contract, err)
		}
		c.t.Cleanup(func() { _ = lk.Unlock(context.WithoutCancel(ctx)) })
		return lk
	}
	for i := range listShared {
		k := key(i*listHeld/listShared, "sem")
		sa, err := locker.NewSemaphore(a, k, 3)
		if unshared(err) {
			c.Logf("the Locker has no shared holds; List is checked on plain locks only: %v", err)
			return nil
		} else if err != nil {
			c.Fatalf("%s: NewSemaphore: %v", contract, err)
		}
		sb, err := locker.NewSemaphore(b, k, 3)
		if err != nil {
			c.Fatalf("%s: NewSemaphore: %v", contract, err)
		}
		pa := hold(sa.TryAcquire(ctx))
		pb := hold(sb.TryAcquire(ctx))
		want[k] = sharedWant{token: pb.Token(), holders: 2, holds: []locker.Lock{pa, pb}}

		k = key(i*listHeld/listShared+1, "rw")
		rw, err := locker.NewRWMutex(b, k)
		if err != nil {
			c.Fatalf("%s: NewRWMutex: %v", contract, err)
		}
		r := hold(rw.TryRLock(ctx))
		want[k] = sharedWant{token: r.Token(), holders: 1, holds: []locker.Lock{r}}
	}
	return want
}

// firstErr runs a listing until its first error.
func firstErr(seq func(func(locker.KeyStatus, error) bool)) error {
	for _, err := range seq {
		if err != nil {
			return err
		}
	}
	return nil
}
