package locker

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"
)

// LockMulti blocks until every key of keys is held by the caller through l,
// ctx ends, l is closed, or the backend fails. It takes all the keys or
// none.
//
// Where the backend can take every key in one store operation (a
// [driver.MultiAcquirer]: one Redis script, one etcd transaction, ...),
// LockMulti does so. While a key is held it tries again, holding nothing,
// for at most one TTL: when a key may have become free, where the backend
// says so ([driver.Notifier]), and otherwise after the Locker's backoff. Then, or when the backend
// cannot (no such driver, keys that do not fit in one operation, keys
// that carry data ([WithData]), a key held up ctx's call chain, a store
// error), it takes the keys one by one in
// byte order, whatever their order in keys. A held key is kept while
// LockMulti waits for the next one. Two callers therefore never wait for
// each other in a cycle. Past that first TTL a caller waits at most as long
// as a Lock on each of its keys in turn would: the store's fairness per key
// bounds its wait.
//
// When LockMulti returns an error, no key is held: the keys taken so far
// are released through Unlock (in the background when ctx has ended), and
// the engine leaves no waiter entry behind. Keys taken with [MinHold] stay
// claimed until it ends, as after any Unlock. The wait also ends when a
// key already taken is lost; the error then matches [ErrNotAcquired] and
// [ErrLost].
//
// Errors match [ErrInvalidOption] for a nil ctx, a nil Locker or no keys,
// [ErrInvalidKey] for a key given twice or a key l refuses, and otherwise
// are those of [Locker.Lock]. opts apply to every key.
func LockMulti(ctx context.Context, l Locker, keys []string, opts ...LockOption) (*MultiLock, error) {
	return lockMulti(ctx, "lockmulti", l, keys, true, opts)
}

// TryLockMulti is LockMulti without waiting: when a key is held elsewhere it
// returns an error matching [ErrNotAcquired]. Where the backend takes the
// keys in one store operation it never holds any of them then, not even for
// a moment; otherwise it releases the keys it took.
func TryLockMulti(ctx context.Context, l Locker, keys []string, opts ...LockOption) (*MultiLock, error) {
	return lockMulti(ctx, "trylockmulti", l, keys, false, opts)
}

// MultiLock is a set of keys held together, each with its own [Lock]. Its
// methods are safe for concurrent use.
type MultiLock struct {
	keys  []string // in the order they were taken (byte order)
	locks []Lock   // locks[i] holds keys[i]

	once sync.Once
	done chan struct{} // closed when the first lock's hold ends
	// watched is closed when the watcher goroutine exited; at once when
	// the engine's holds close done themselves.
	watched chan struct{}
}

// Keys returns the keys in the order they were taken (byte order). The
// caller may modify the returned slice.
func (m *MultiLock) Keys() []string { return slices.Clone(m.keys) }

// Locks returns each key's [Lock], in the order of Keys. The caller may
// modify the returned slice.
func (m *MultiLock) Locks() []Lock { return slices.Clone(m.locks) }

// Token returns key's fencing token, or 0 for a key the MultiLock does not
// hold.
func (m *MultiLock) Token(key string) uint64 {
	if lk := m.lock(key); lk != nil {
		return lk.Token()
	}
	return 0
}

// lock returns key's Lock, or nil.
func (m *MultiLock) lock(key string) Lock {
	if i, ok := slices.BinarySearch(m.keys, key); ok {
		return m.locks[i]
	}
	return nil
}

// Done returns a channel that is closed once any of the keys is no longer
// held: unlocked, lost, or its Locker closed. Like [Lock.Done] it closes
// before the store could give that key to anyone else.
func (m *MultiLock) Done() <-chan struct{} {
	m.sync()
	return m.done
}

// Err returns nil while every key is held or after Unlock, and the error of
// the first lock found lost (matching [ErrLost]) otherwise.
func (m *MultiLock) Err() error {
	for _, lk := range m.locks {
		if err := lk.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Deadline returns the earliest of the keys' local deadlines: when Done
// closes unless renewals succeed first.
func (m *MultiLock) Deadline() time.Time {
	var d time.Time
	for i, lk := range m.locks {
		if dl := lk.Deadline(); i == 0 || dl.Before(d) {
			d = dl
		}
	}
	return d
}

// Unlock releases every key, all at once, and returns when every release
// has returned. Where the backend can release several keys in one store
// call ([driver.MultiReleaser]), it makes one. Its errors are those of
// [Lock.Unlock], joined: it matches [ErrNotHeld] when a key was already
// released or lost. ctx bounds the store calls as it does for
// Lock.Unlock, and keys whose release was cut short are still released in
// the background. After Unlock returns, Done is closed.
func (m *MultiLock) Unlock(ctx context.Context) error {
	var errs []error
	if e, hs := releasesTogether(m.locks); e != nil {
		errs = e.unlockAll(ctx, hs)
	} else {
		errs = make([]error, len(m.locks))
		var wg sync.WaitGroup
		for i, lk := range m.locks[1:] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i+1] = lk.Unlock(ctx)
			}()
		}
		errs[0] = m.locks[0].Unlock(ctx)
		wg.Wait()
	}
	m.end()
	<-m.watched
	return join(errs...)
}

// sync closes done when a lock's Done is closed: asked directly, so that a
// lock past its deadline shows at once even when the watcher runs late.
func (m *MultiLock) sync() {
	for _, lk := range m.locks {
		select {
		case <-lk.Done():
			m.end()
			return
		default:
		}
	}
}

func (m *MultiLock) end() { m.once.Do(func() { close(m.done) }) }

// watch closes done when the first lock's Done closes. It exits then, or
// once every lock has ended (Unlock, Close), whichever comes first.
func (m *MultiLock) watch() {
	defer close(m.watched)
	cases := make([]reflect.SelectCase, len(m.locks)+1)
	for i, lk := range m.locks {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(lk.Done())}
	}
	cases[len(m.locks)] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(m.done)}
	reflect.Select(cases)
	m.end()
}

// multiKeys checks keys and returns them sorted.
func multiKeys(op string, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, &Error{Op: op, Err: ErrInvalidOption, Cause: errors.New("no keys")}
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if k == "" {
			return nil, &Error{Op: op, Err: ErrInvalidKey, Cause: errors.New("empty key")}
		}
		if i > 0 && sorted[i-1] == k {
			return nil, &Error{Op: op, Key: k, Err: ErrInvalidKey, Cause: errors.New("key given twice")}
		}
	}
	return sorted, nil
}

func lockMulti(ctx context.Context, op string, l Locker, keys []string, wait bool, opts []LockOption) (*MultiLock, error) {
	switch {
	case ctx == nil:
		return nil, &Error{Op: op, Err: ErrInvalidOption, Cause: errNilContext}
	case l == nil:
		return nil, &Error{Op: op, Err: ErrInvalidOption, Cause: errors.New("nil Locker")}
	}
	sorted, err := multiKeys(op, keys)
	if err != nil {
		return nil, err
	}
	if mt, ok := l.(multiTaker); ok {
		locks, fallback, err := mt.tryMulti(ctx, op, sorted, wait, opts)
		if err != nil {
			return nil, err
		}
		if !fallback {
			return newMultiLock(sorted, locks), nil
		}
	}
	locks := make([]Lock, 0, len(sorted))
	rollback := func(cause error) (*MultiLock, error) {
		// The caller's ctx: when it has ended, each Unlock releases in
		// the background and returns at once.
		for _, lk := range locks {
			_ = lk.Unlock(ctx)
		}
		return nil, cause
	}
	for _, key := range sorted {
		var lk Lock
		var err error
		if wait && len(locks) > 0 {
			lk, err = lockWatching(ctx, l, key, locks, opts)
		} else if wait {
			lk, err = l.Lock(ctx, key, opts...)
		} else {
			lk, err = l.TryLock(ctx, key, opts...)
		}
		if err != nil {
			return rollback(err)
		}
		locks = append(locks, lk)
	}
	return newMultiLock(sorted, locks), nil
}

// newMultiLock returns the MultiLock of locks, which hold keys, and starts
// its watcher.
func newMultiLock(keys []string, locks []Lock) *MultiLock {
	m := &MultiLock{keys: keys, locks: locks, done: make(chan struct{}), watched: make(chan struct{})}
	for _, lk := range locks {
		if _, ok := lk.(*handle); !ok {
			go m.watch()
			return m
		}
	}
	// The engine's holds end m as they end (hold.end): no watcher.
	close(m.watched)
	for _, lk := range locks {
		h := lk.(*handle).h
		h.group.Store(m)
		if h.ended.Load() {
			m.end()
		}
	}
	return m
}

// lockWatching is l.Lock(ctx, key) that gives up, with an error matching
// ErrNotAcquired and ErrLost, when one of held is lost while it waits.
func lockWatching(ctx context.Context, l Locker, key string, held []Lock, opts []LockOption) (Lock, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		cases := make([]reflect.SelectCase, len(held)+1)
		for i, lk := range held {
			cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(lk.Done())}
		}
		cases[len(held)] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(stop)}
		if i, _, _ := reflect.Select(cases); i < len(held) {
			cancel(fmt.Errorf("key %s was lost while waiting for %s: %w", quoteKey(held[i].Key()), quoteKey(key), errLostOrEnded(held[i])))
		}
	}()
	lk, err := l.Lock(wctx, key, opts...)
	close(stop)
	<-watched
	if ctx.Err() == nil && context.Cause(wctx) != nil {
		if err == nil {
			// The key came as the loss was noticed: give it back.
			_ = lk.Unlock(ctx)
		}
		return nil, &Error{Op: "lockmulti", Key: key, Err: ErrNotAcquired, Cause: context.Cause(wctx)}
	}
	return lk, err
}

// errLostOrEnded is lk's loss, or a text for a lock that ended without one.
func errLostOrEnded(lk Lock) error {
	if err := lk.Err(); err != nil {
		return err
	}
	return ErrLost
}

// DoMulti takes every key of keys with [LockMulti], runs fn while holding
// them, and releases them: [Do] for several keys. fn's ctx is cancelled,
// with a cause matching [ErrLost], the moment any of the keys is lost. The
// keys are released when fn returns or panics, as Do releases its key.
// Inside fn's ctx, Lock, TryLock, Do and TryDo on any of the keys through
// the same Locker return a nested hold at once.
//
// DoMulti returns fn's error, joined with the loss when a key was lost
// while fn ran. When the keys could not all be taken it returns
// LockMulti's error and fn is not run. A nil ctx, Locker or fn gives an
// error matching [ErrInvalidOption].
func DoMulti(ctx context.Context, l Locker, keys []string, fn func(ctx context.Context) error, opts ...LockOption) error {
	return doMulti(ctx, "domulti", l, keys, fn, true, opts)
}

// TryDoMulti is DoMulti without waiting: when a key is held elsewhere it
// returns an error matching [ErrNotAcquired] and fn is not run.
func TryDoMulti(ctx context.Context, l Locker, keys []string, fn func(ctx context.Context) error, opts ...LockOption) error {
	return doMulti(ctx, "trydomulti", l, keys, fn, false, opts)
}

func doMulti(ctx context.Context, op string, l Locker, keys []string, fn func(ctx context.Context) error, wait bool, opts []LockOption) error {
	if fn == nil {
		return &Error{Op: op, Err: ErrInvalidOption, Cause: errors.New("nil function")}
	}
	m, err := lockMulti(ctx, op, l, keys, wait, opts)
	if err != nil {
		return err
	}
	entries := make([]*heldEntry, len(m.keys))
	next := heldList(ctx)
	for i, key := range m.keys {
		entries[i] = &heldEntry{locker: l, key: key, lock: m.locks[i], next: next}
		next = entries[i]
	}
	return runHeld(ctx, m, entries, fn)
}
