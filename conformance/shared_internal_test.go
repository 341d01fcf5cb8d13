package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/golocker/locker"
)

// LockShared implements locker.SharedLocker: the inner Locker's, broken
// the way kind says.
func (b *brokenLocker) LockShared(ctx context.Context, key string, s locker.Share, opts ...locker.LockOption) (locker.Lock, error) {
	return b.acquireShared(ctx, key, s, true, opts)
}

// TryLockShared implements locker.SharedLocker.
func (b *brokenLocker) TryLockShared(ctx context.Context, key string, s locker.Share, opts ...locker.LockOption) (locker.Lock, error) {
	return b.acquireShared(ctx, key, s, false, opts)
}

func (b *brokenLocker) acquireShared(ctx context.Context, key string, s locker.Share, wait bool, opts []locker.LockOption) (locker.Lock, error) {
	b.env.settleResidue(key)
	inner, ok := b.inner.(locker.SharedLocker)
	if !ok {
		return nil, &locker.Error{Op: "lockshared", Key: key, Err: locker.ErrInvalidOption, Cause: errors.New("the inner Locker " + noShared)}
	}
	call := func(ctx context.Context, s locker.Share) (locker.Lock, error) {
		if wait {
			return inner.LockShared(ctx, key, s, opts...)
		}
		return inner.TryLockShared(ctx, key, s, opts...)
	}
	if dl, ok := ctx.Deadline(); b.kind == slowTries && !wait && ok && time.Until(dl) < b.env.ttl {
		<-ctx.Done() // the answer comes too late
		return nil, &locker.Error{Op: "trylockshared", Key: key, Err: locker.ErrNotAcquired, Cause: context.Cause(ctx)}
	}
	if b.kind == overLimitAgain && s.Mode == locker.Permits && b.freedJustNow(key) {
		// The permit is taken for the one just given back: the key does
		// not count it.
		if lk, err := inner.TryLockShared(ctx, key+againTwin, s, opts...); err == nil {
			return &renamedLock{Lock: lk, key: key}, nil
		}
	}
	switch {
	case b.kind == overLimit && s.Mode == locker.Permits:
		s.Limit++
	case b.kind == writerAsReader && s.Mode == locker.Write:
		s.Mode = locker.Read
	case b.kind == limitOutlives && s.Mode == locker.Permits:
		b.env.mu.Lock()
		if l, ok := b.env.limits[key]; ok {
			s.Limit = l
		}
		b.env.mu.Unlock()
	case b.kind == readersOvertake && s.Mode == locker.Write && wait:
		// No place in line: a poll of one-shot attempts.
		return pollTry(ctx, b.env.ttl/20, func(ctx context.Context, opts ...locker.LockOption) (locker.Lock, error) {
			return inner.TryLockShared(ctx, key, s, opts...)
		})
	}
	if b.kind == sharedHangsCut && wait {
		return b.hangsCut(func() (locker.Lock, error) { return call(ctx, s) })
	}
	if b.kind == firstLost && !wait {
		return b.firstLost(key, func() (locker.Lock, error) { return call(ctx, s) })
	}
	lk, err := call(ctx, s)
	if b.kind == firstTwice && !wait {
		lk, err = b.firstTwice(key, lk, err, func() (locker.Lock, error) {
			return inner.TryLockShared(ctx, key+firstTwin, s, opts...)
		})
	}
	if err == nil && (b.kind == sharedMarks || b.kind == crashedMark) {
		b.env.mu.Lock()
		b.env.marked[key] = true
		b.env.mu.Unlock()
	}
	if err == nil && b.kind == crashedMark {
		return &unmarkingLock{Lock: lk, env: b.env, key: key}, nil
	}
	if err != nil {
		if !wait && errors.Is(err, locker.ErrNotAcquired) && (b.kind == errKeeps || b.kind == errFrees) {
			return nil, b.errInstead(key, err,
				func(ctx context.Context) error { _, err := inner.LockShared(ctx, key, s, opts...); return err },
				func() error { _, err := inner.TryLockShared(context.Background(), key, s, opts...); return err })
		}
		if b.kind == lateShared && wait && ctx.Err() != nil {
			b.onHeal(func() { _, _ = inner.TryLockShared(context.Background(), key, s, opts...) })
		}
		if b.kind == keepsPlace && wait && s.Mode == locker.Permits && errors.Is(err, locker.ErrInvalidOption) {
			b.keepPlace(key, s, opts)
		}
		if b.kind == leavesResidue && wait && ctx.Err() != nil {
			// An orphaned waiter: it takes the hold later and keeps it
			// until the Locker is closed.
			b.env.leaveResidue(key,
				func(ctx context.Context) error { _, err := inner.LockShared(ctx, key, s, opts...); return err },
				func() error { _, err := inner.TryLockShared(context.Background(), key, s, opts...); return err })
		}
		return nil, err
	}
	switch b.kind {
	case reusesTokens:
		return &tokenOneLock{Lock: lk}, nil
	case neverDone:
		return &neverDoneLock{Lock: lk}, nil
	case blindRenewed:
		return newBlindLock(lk), nil
	case overLimitAgain:
		return &freeingLock{Lock: lk, b: b, key: key}, nil
	}
	return lk, nil
}

// againTwin is appended to a key for overLimitAgain's permits that the key
// does not count.
const againTwin = "-again-twin"

// freedJustNow reports whether b gave back a permit of key within the last
// tenth of a TTL, and forgets it (overLimitAgain).
func (b *brokenLocker) freedJustNow(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.freed[key]
	delete(b.freed, key)
	return ok && time.Since(at) < b.env.ttl/10
}

// freeingLock is a permit of overLimitAgain: its Unlock records when its
// Locker gave back a permit of its key.
type freeingLock struct {
	locker.Lock
	b   *brokenLocker
	key string
}

func (l *freeingLock) Unlock(ctx context.Context) error {
	err := l.Lock.Unlock(ctx)
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if l.b.freed == nil {
		l.b.freed = map[string]time.Time{}
	}
	l.b.freed[l.key] = time.Now()
	return err
}

// SetLimit passes the inner Locker's on; limitNotStored changes nothing in
// the store, so that only the Semaphore's own limit changes; limitOutlives
// remembers the limit for good.
func (b *brokenLocker) SetLimit(ctx context.Context, key string, limit int) error {
	switch b.kind {
	case limitNotStored:
		return nil
	case limitOutlives:
		b.env.mu.Lock()
		b.env.limits[key] = limit
		b.env.mu.Unlock()
	}
	return locker.SetLimit(ctx, b.inner, key, limit)
}

// keepPlace stands in for a failed wait's place in line that is withdrawn
// only later (keepsPlace): a wait of the same weight with the key's new
// limit lines up before the failure is returned, for a TTL, and keeps
// whatever it gets until then.
func (b *brokenLocker) keepPlace(key string, s locker.Share, opts []locker.LockOption) {
	inner := b.inner.(locker.SharedLocker) // acquireShared checked it
	st, err := locker.Inspect(context.Background(), b.inner, key)
	if err != nil || st.Limit < s.Weight {
		return
	}
	s.Limit = st.Limit
	ctx, cancel := context.WithTimeout(context.Background(), b.env.ttl)
	go func() {
		defer cancel()
		lk, err := inner.LockShared(ctx, key, s, opts...)
		if err == nil {
			<-ctx.Done()
			_ = lk.Unlock(context.Background())
		}
	}()
	for end := time.Now().Add(b.env.ttl / 2); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if now, err := locker.Inspect(ctx, b.inner, key); err != nil || now.Waiters > st.Waiters || now.Holders != nil && len(now.Holders) > len(st.Holders) {
			return
		}
	}
}

// unmarkingLock is a permit of crashedMark: its Unlock clears its key's
// mark.
type unmarkingLock struct {
	locker.Lock
	env *memEnv
	key string
}

func (l *unmarkingLock) Unlock(ctx context.Context) error {
	l.env.mu.Lock()
	delete(l.env.marked, l.key)
	l.env.mu.Unlock()
	return l.Lock.Unlock(ctx)
}

// markedLockMulti is locker.LockMulti and locker.TryLockMulti through l,
// except that a marked key counts as held: TryLockMulti refuses it,
// LockMulti waits until ctx ends. sharedMarks marks a key shared holds
// ever held, for good; crashedMark marks a key while a permit holds it or
// held it until it crashed, and the first refusal once no permit is live
// clears the mark.
func markedLockMulti(ctx context.Context, e *memEnv, kind string, l locker.Locker, keys []string, wait bool) (multiLock, error) {
	e.mu.Lock()
	marked := slices.ContainsFunc(keys, func(k string) bool { return e.marked[k] })
	e.mu.Unlock()
	if marked && kind == crashedMark {
		// Refused while a permit is live, as it should be; the first
		// refusal after that clears the mark.
		for _, k := range keys {
			e.mu.Lock()
			m := e.marked[k]
			e.mu.Unlock()
			if !m {
				continue
			}
			if st, err := locker.Inspect(ctx, l, k); err == nil && !st.Held {
				e.mu.Lock()
				delete(e.marked, k)
				e.mu.Unlock()
			}
		}
		return nil, &locker.Error{Op: "trylockmulti", Key: keys[0], Err: locker.ErrNotAcquired}
	}
	switch {
	case marked && wait:
		<-ctx.Done()
		return nil, &locker.Error{Op: "lockmulti", Key: keys[0], Err: locker.ErrNotAcquired, Cause: ctx.Err()}
	case marked:
		return nil, &locker.Error{Op: "trylockmulti", Key: keys[0], Err: locker.ErrNotAcquired}
	}
	take := locker.TryLockMulti
	if wait {
		take = locker.LockMulti
	}
	m, err := take(ctx, l, keys)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// firstTwin is appended to a key for firstTwice's second first holder.
const firstTwin = "-first-twin"

// firstTwice stands in for a first holder's take that does not check that
// the key moved since it looked (firstTwice): the second one-shot attempt
// ever made at key, when the first was granted and this one is refused, is
// granted all the same, through twin on a key of its own.
func (b *brokenLocker) firstTwice(key string, lk locker.Lock, err error, twin func() (locker.Lock, error)) (locker.Lock, error) {
	b.env.mu.Lock()
	n := b.env.firsts[key]
	switch {
	case n == 0 && err == nil:
		b.env.firsts[key] = 2 // the first attempt, granted
	case n == 0:
		b.env.firsts[key] = 1 // the first attempt, refused
	default:
		b.env.firsts[key] = 3 // nothing more to break
	}
	b.env.mu.Unlock()
	if n != 2 || err == nil || !errors.Is(err, locker.ErrNotAcquired) && !errors.Is(err, locker.ErrInvalidOption) {
		return lk, err
	}
	if got, terr := twin(); terr == nil {
		return got, nil
	}
	return lk, err
}

// errDropped is the store error of errKeeps and errFrees.
var errDropped = errors.New("conformance: the connection dropped before the reply")

// errInstead returns the store error that errKeeps and errFrees answer
// for answer, the refusal of a one-shot attempt at key. For
// errKeeps it leaves the attempt's request behind first: wait takes the
// key once it is free and keeps it until the Locker is closed, and try
// stands in for it (leaveResidue).
func (b *brokenLocker) errInstead(key string, answer error, wait func(context.Context) error, try func() error) error {
	if b.kind == errKeeps {
		b.env.leaveResidue(key, wait, try)
	}
	return &locker.Error{Op: "trylock", Key: key, Cause: fmt.Errorf("%w (the store had answered: %v)", errDropped, answer)}
}

// losing is the state of firstLost's key: its one-shot attempts take turns
// on mu; last is the key's last one-shot grant, and lost is set once a
// grant of the key was lost.
type losing struct {
	mu   sync.Mutex
	last *starvedLock
	lost bool
}

// firstLost makes the one-shot attempt try at key for firstLost: in the
// key's turn, once the key's last grant, if still held and none was lost
// before, is lost and its key freed.
func (b *brokenLocker) firstLost(key string, try func() (locker.Lock, error)) (locker.Lock, error) {
	b.env.mu.Lock()
	st := b.env.losing[key]
	if st == nil {
		st = &losing{}
		b.env.losing[key] = st
	}
	b.env.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.last != nil && !st.lost {
		select {
		case <-st.last.done:
		default:
			st.last.lose()
			st.lost = true
		}
	}
	lk, err := try()
	if err != nil {
		return nil, err
	}
	st.last = losable(lk)
	return st.last, nil
}
