package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golocker/locker"
)

// firstHolders is the contract of FirstHolder.
const firstHolders = "the first holders of a free key are held to its kind and limit: never more permits than the limit at once, never a plain lock or another kind beside a shared hold"

// firstErrFree is the contract of FirstHolder for an attempt that failed
// with a store error.
const firstErrFree = "a one-shot attempt that fails with a store error takes nothing: once the grants beside it are released, another Locker takes the key within TTL/2"

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
	// at is when the attempt returned, since the race began.
	at time.Duration
	// after are the grants of the race that returned before this
	// attempt and had lost their hold when it returned (their Done
	// closed, as asked then), with their Err.
	after map[*attempt]error
}

// testFirstHolder races the first acquisition of many free keys. On each
// key, four Lockers released at once by one signal each try once: in the
// first round all four for the one permit of a semaphore, in the second
// one TryLock, one TryAcquire and two TryRLock. Nobody releases until every
// attempt returned, so every grant counts as held at once. Every other key
// was held and released once before the race: a store may keep a freed
// key's record, and its first holder then takes another path. The keys
// race firstBatch at a time, on one signal. An attempt that fails with a
// store error counts as refused only when it took nothing
// (firstErrFreed).
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
	released := time.Now()
	for j, key := range keys {
		ok = ok && c.firstErrFreed(ctx, ls, key, tries[j], released)
	}
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
// they all returned. As each attempt returns, it asks the grants that
// returned before it whether they still hold (their Done), so that a
// grant made after an earlier one was lost tells itself apart.
func race(ctx context.Context, tries []*attempt) {
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	var mu sync.Mutex
	var granted []*attempt
	began := time.Now()
	for _, a := range tries {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			lk, err := a.try(ctx)
			mu.Lock()
			defer mu.Unlock()
			a.lk, a.err, a.at = lk, err, time.Since(began)
			if err != nil {
				return
			}
			a.after = map[*attempt]error{}
			for _, o := range granted {
				select {
				case <-o.lk.Done():
					a.after[o] = o.lk.Err()
				default:
				}
			}
			granted = append(granted, a)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}

// firstFits checks the grants of one key against its kind and limit. Two
// grants conflict unless both are read holds: the limit is one permit, a
// plain lock is alone, and kinds do not mix. A grant that returned after
// the other had lost its hold (its Done closed, asked when the later one
// returned) is no breach: the contract lets a lock be lost, and the key
// be taken then. Every other conflicting pair held the key at once.
func (c *caseT) firstFits(key, round string, tries []*attempt) bool {
	c.Helper()
	var granted []*attempt
	for _, a := range tries {
		if a.err == nil {
			granted = append(granted, a)
		}
	}
	slices.SortStableFunc(granted, func(x, y *attempt) int { return cmp.Compare(x.at, y.at) })
	breach := false
	for i, later := range granted {
		for _, earlier := range granted[:i] {
			if earlier.what == "TryRLock" && later.what == "TryRLock" {
				continue
			}
			if lost, ok := later.after[earlier]; ok {
				c.Logf("%s (token %d) at %s was granted %v after the race began, when %s (token %d) had lost its hold: %v",
					later.what, later.lk.Token(), short(key), later.at.Round(time.Millisecond), earlier.what, earlier.lk.Token(), lost)
				continue
			}
			breach = true
		}
	}
	if !breach {
		return true
	}
	states := make([]string, len(granted))
	for i, a := range granted {
		state := "Done open"
		select {
		case <-a.lk.Done():
			state = fmt.Sprintf("Done closed, Err %v", a.lk.Err())
		default:
		}
		states[i] = fmt.Sprintf("%s (token %d, returned %v after the race began; now %s)", a.what, a.lk.Token(), a.at.Round(time.Millisecond), state)
	}
	c.Errorf("%s: %d first attempts at the free key %s (round %s) held it at once, an earlier grant's Done open when a later one returned: %s",
		firstHolders, len(granted), short(key), round, strings.Join(states, ", "))
	return false
}

// firstErrs checks the refusals of one key: each matches ErrNotAcquired,
// or ErrInvalidOption for a hold of another kind than the key's, or is a
// store error, which firstErrFreed checks later. At least one attempt was
// granted, or the case says so.
func (c *caseT) firstErrs(key string, tries []*attempt) bool {
	c.Helper()
	got := false
	for _, a := range tries {
		switch {
		case a.err == nil:
			got = true
		case storeError(a.err):
			c.Logf("%s on %s failed with a store error: %v", a.what, short(key), a.err)
		case !errors.Is(a.err, locker.ErrNotAcquired) && !errors.Is(a.err, locker.ErrInvalidOption):
			c.Errorf("%s: %s on %s, raced by other first attempts: got %v, want a grant, an error matching ErrNotAcquired (ErrInvalidOption for another kind), or a store error", firstHolders, a.what, short(key), a.err)
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

// firstErrFreed checks that the attempts at key that failed with a store
// error took nothing. A store error says nothing of what the store did:
// a create whose reply was lost may have queued or taken the key. So once
// the grants were released (at released), another Locker must take the
// key within TTL/2, riding out refusals and store errors meanwhile, as
// the driver cleans up. That Locker is one whose attempt did not fail so.
func (c *caseT) firstErrFreed(ctx context.Context, ls [4]locker.Locker, key string, tries []*attempt, released time.Time) bool {
	c.Helper()
	var erred *attempt
	other := -1
	for i, a := range tries {
		switch {
		case storeError(a.err):
			if erred == nil {
				erred = a
			}
		case other < 0:
			other = i
		}
	}
	if erred == nil {
		return true
	}
	l := ls[max(other, 0)]
	lk, err := c.soonTry(ctx, notFinal, func(ctx context.Context, opts ...locker.LockOption) (locker.Lock, error) {
		return l.TryLock(ctx, key, opts...)
	}, released, c.h.TTL/2)
	if err != nil {
		c.Errorf("%s: %s on %s failed with %v; another Locker's TryLock %v after the grants beside it were released: %v",
			firstErrFree, erred.what, short(key), erred.err, time.Since(released).Round(time.Millisecond), err)
		return false
	}
	c.unlock(ctx, lk, firstErrFree)
	return true
}

// storeError reports whether err is a store's error: an error that
// matches none of the locker sentinels.
func storeError(err error) bool {
	if err == nil {
		return false
	}
	for _, s := range []error{locker.ErrNotAcquired, locker.ErrInvalidOption, locker.ErrNotHeld, locker.ErrLost, locker.ErrClosed, locker.ErrInvalidKey} {
		if errors.Is(err, s) {
			return false
		}
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
