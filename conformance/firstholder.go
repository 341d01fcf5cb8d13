package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/golocker/locker"
)

// firstHolders is the contract of FirstHolder.
const firstHolders = "the first holders of a free key are held to its kind and limit: never more permits than the limit at once, never a plain lock or another kind beside a shared hold"

// firstKeys is how many free keys each round of FirstHolder races on,
// firstBatch at a time.
const firstKeys, firstBatch = 40, 4

// attempt is one contender of a FirstHolder race: what it called, and what
// it got.
type attempt struct {
	what string // "TryAcquire", "TryLock", "TryRLock"
	try  func(context.Context, ...locker.LockOption) (locker.Lock, error)
	lk   locker.Lock
	err  error
}

// testFirstHolder races the first acquisition of many free keys. On each
// key, four Lockers released at once by one signal each try once: in the
// first round all four for the one permit of a semaphore, in the second
// one TryLock, one TryAcquire and two TryRLock. Nobody releases until every
// attempt returned, so every grant counts as held at once. Every other key
// was held and released once before the race: a store may keep a freed
// key's record, and its first holder then takes another path. The keys
// race firstBatch at a time, on one signal.
func testFirstHolder(c *caseT) {
	var ls [4]locker.Locker
	for i := range ls {
		ls[i] = c.newLocker()
	}
	c.semaphore(ls[0], c.key(), 1) // skips for a Locker with no shared holds
	for _, round := range []string{"permits", "kinds"} {
		for i := 0; i < firstKeys; i += firstBatch {
			if !c.firstRace(ls, round) {
				return
			}
		}
	}
}

// firstRace races the first acquisition of firstBatch free keys, and
// reports whether the grants and refusals fit. Each batch has its own
// budget of a TTL and the slack: the calls on its 80 keys outlasted 4
// TTLs and the slack on PostgreSQL at load 17, though no batch stalled.
func (c *caseT) firstRace(ls [4]locker.Locker, round string) bool {
	c.Helper()
	ctx, cancel := c.ctxCancel(c.within(1))
	defer cancel()
	keys := make([]string, firstBatch)
	tries := make([][]*attempt, firstBatch)
	var all []*attempt
	for j := range keys {
		keys[j] = c.key()
		if j%2 == 1 {
			c.useOnce(ctx, ls[j], keys[j], j == 1)
		}
		tries[j] = c.firstTries(ls, keys[j], round)
		all = append(all, tries[j]...)
	}
	race(ctx, all)
	ok := true
	for j, key := range keys {
		ok = ok && c.firstFits(key, round, tries[j]) && c.firstErrs(key, tries[j])
	}
	releaseAll(ctx, all)
	return ok
}

// useOnce takes key through l and releases it, with a permit of a
// semaphore of 1 or with a plain lock.
func (c *caseT) useOnce(ctx context.Context, l locker.Locker, key string, permit bool) {
	c.Helper()
	var lk locker.Lock
	var err error
	if permit {
		lk, err = c.semaphore(l, key, 1).TryAcquire(ctx)
	} else {
		lk, err = l.TryLock(ctx, key)
	}
	if err != nil {
		c.Fatalf("%s: taking the free key %s before the race: %v", firstHolders, short(key), err)
	}
	c.unlock(ctx, lk, firstHolders)
}

// firstTries returns the contenders of one key: four permits of a
// semaphore of 1 ("permits"), or a plain lock, a permit and two read holds
// ("kinds"), each through its own Locker.
func (c *caseT) firstTries(ls [4]locker.Locker, key, round string) []*attempt {
	c.Helper()
	tries := make([]*attempt, len(ls))
	for i, l := range ls {
		a := &attempt{what: "TryAcquire"}
		switch {
		case round == "kinds" && i == 0:
			a.what = "TryLock"
			a.try = func(ctx context.Context, opts ...locker.LockOption) (locker.Lock, error) {
				return l.TryLock(ctx, key, opts...)
			}
		case round == "kinds" && i >= 2:
			a.what = "TryRLock"
			a.try = c.rwmutex(l, key).TryRLock
		default:
			a.try = c.semaphore(l, key, 1).TryAcquire
		}
		tries[i] = a
	}
	return tries
}

// race starts every attempt at once, on a closed channel, and returns when
// they all returned.
func race(ctx context.Context, tries []*attempt) {
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for _, a := range tries {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			a.lk, a.err = a.try(ctx)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}

// firstFits checks the grants of one key against its kind and limit.
func (c *caseT) firstFits(key, round string, tries []*attempt) bool {
	c.Helper()
	n := map[string]int{}
	var granted []string
	for _, a := range tries {
		if a.err == nil {
			n[a.what]++
			granted = append(granted, fmt.Sprintf("%s (token %d)", a.what, a.lk.Token()))
		}
	}
	kinds := 0
	for _, k := range n {
		if k > 0 {
			kinds++
		}
	}
	if n["TryAcquire"] <= 1 && n["TryLock"] <= 1 && kinds <= 1 {
		return true
	}
	c.Errorf("%s: %d first attempts at the free key %s (round %s) held it at once: %s", firstHolders, len(granted), short(key), round, strings.Join(granted, ", "))
	return false
}

// firstErrs checks the refusals of one key: each matches ErrNotAcquired,
// or ErrInvalidOption for a hold of another kind than the key's, and at
// least one attempt was granted.
func (c *caseT) firstErrs(key string, tries []*attempt) bool {
	c.Helper()
	got := false
	for _, a := range tries {
		switch {
		case a.err == nil:
			got = true
		case !errors.Is(a.err, locker.ErrNotAcquired) && !errors.Is(a.err, locker.ErrInvalidOption):
			c.Errorf("%s: %s on %s, raced by other first attempts: got %v, want a grant or an error matching ErrNotAcquired (ErrInvalidOption for another kind)", firstHolders, a.what, short(key), a.err)
			return false
		}
	}
	if !got {
		// A store may refuse every contender that lost a conflict;
		// that is no breach, but say so.
		c.Logf("no first attempt at %s was granted: %v", short(key), tries[0].err)
	}
	return true
}

// releaseAll releases the grants of a race.
func releaseAll(ctx context.Context, tries []*attempt) {
	for _, a := range tries {
		if a.err == nil {
			_ = a.lk.Unlock(context.WithoutCancel(ctx))
		}
	}
}
