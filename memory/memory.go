package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

// ErrUnreachable is returned by every store call of a Locker whose [Fault]
// is cut, standing for a network partition.
var ErrUnreachable = errors.New("memory: store unreachable (fault injected)")

// Store is the shared lock table. It is safe for concurrent use. The zero
// value is not usable: call [NewStore].
type Store struct {
	mu     sync.Mutex
	locks  map[string]*entry
	shares map[string]*shared // keys held by semaphore permits or read-write holds
	subs   map[string]*subSet
	seq    uint64 // last fencing token handed out, for every key
}

// subSet is the set of waiters subscribed to one key.
type subSet struct{ chans map[chan struct{}]struct{} }

type entry struct {
	owner    string
	label    string
	data     []byte // the holder's (locker.WithData, locker.SetData)
	token    uint64
	expires  time.Time // monotonic
	acquired time.Time
	kept     bool // given up with a MinHold left: taken until expires
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{
		locks:  make(map[string]*entry),
		shares: make(map[string]*shared),
		subs:   make(map[string]*subSet),
	}
}

// New returns a Locker on store. The options are the shared locker options.
//
// It returns an error matching locker.ErrInvalidOption for a nil Store or a
// zero Store not made by [NewStore], and for a bad option.
func New(store *Store, opts ...locker.Option) (locker.Locker, error) {
	if err := usable(store); err != nil {
		return nil, err
	}
	return locker.New(&memDriver{store: store}, opts...)
}

// usable checks that store was made by NewStore.
func usable(store *Store) error {
	var cause error
	switch {
	case store == nil:
		cause = errors.New("nil *memory.Store")
	case store.locks == nil:
		cause = errors.New("zero memory.Store: make it with memory.NewStore")
	default:
		return nil
	}
	return &locker.Error{Op: "new", Backend: "memory", Err: locker.ErrInvalidOption, Cause: cause}
}

// Fault controls injected failures of one Locker made by [NewFaulty].
type Fault struct{ cut atomic.Bool }

// Cut makes every store call of the Locker fail with [ErrUnreachable], as a
// network partition would; the store keeps its locks until they expire.
func (f *Fault) Cut() { f.cut.Store(true) }

// Heal undoes Cut.
func (f *Fault) Heal() { f.cut.Store(false) }

// NewFaulty is New with a [Fault] to cut this Locker off from the store and
// heal it, for tests of lost-lock handling.
func NewFaulty(store *Store, opts ...locker.Option) (locker.Locker, *Fault, error) {
	if err := usable(store); err != nil {
		return nil, nil, err
	}
	f := &Fault{}
	l, err := locker.New(&memDriver{store: store, fault: f}, opts...)
	if err != nil {
		return nil, nil, err
	}
	return l, f, nil
}

// DeleteKey removes the lock on a store key (the caller's key with the
// Locker's prefix), as an operator deleting it behind the holder's back
// would. The holder notices at its next renewal.
func (s *Store) DeleteKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.locks[key]; ok {
		delete(s.locks, key)
		s.notifyLocked(key)
	}
	if _, ok := s.shares[key]; ok {
		delete(s.shares, key)
		s.notifyLocked(key)
	}
}

// Holder reports the owner label and fencing token of the current holder of
// a store key, and whether it is held.
func (s *Store) Holder(key string) (label string, token uint64, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.live(key, time.Now())
	if e == nil {
		return "", 0, false
	}
	return e.label, e.token, true
}

// Subscribers reports how many waiters are subscribed to releases of a store
// key; tests use it to check that cancelled waits leave nothing behind.
func (s *Store) Subscribers(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if set := s.subs[key]; set != nil {
		return len(set.chans)
	}
	return 0
}

// live returns the unexpired entry for key, dropping an expired one.
func (s *Store) live(key string, now time.Time) *entry {
	e := s.locks[key]
	if e != nil && !now.Before(e.expires) {
		delete(s.locks, key)
		return nil
	}
	return e
}

func (s *Store) notifyLocked(key string) {
	set := s.subs[key]
	if set == nil {
		return
	}
	for ch := range set.chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// memDriver speaks to a Store.
type memDriver struct {
	store *Store
	fault *Fault
}

func (d *memDriver) check(ctx context.Context) error {
	if d.fault != nil && d.fault.cut.Load() {
		return ErrUnreachable
	}
	return ctx.Err()
}

func (d *memDriver) Info() driver.Info {
	return driver.Info{Name: "memory", PerLockTTL: true, PromptCancel: true}
}

func (d *memDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := d.check(ctx); err != nil {
		return driver.Grant{}, err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if e := s.live(req.Key, now); e != nil {
		return driver.Grant{}, driver.Held(e.expires.Sub(now))
	}
	if sh := s.liveShared(req.Key, now); sh != nil {
		return driver.Grant{}, fmt.Errorf("%w: the key is %s, not a plain lock", driver.ErrConflict, sh.kind())
	}
	s.seq++
	s.locks[req.Key] = &entry{owner: req.Owner, label: req.Label, data: bytes.Clone(req.Data), token: s.seq, expires: now.Add(req.TTL), acquired: now}
	return driver.Grant{Token: s.seq, Validity: req.TTL}, nil
}

// Renew implements driver.Renewer.
func (d *memDriver) Renew(ctx context.Context, l driver.Lease) (time.Duration, error) {
	if err := d.check(ctx); err != nil {
		return 0, err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if h := s.sharedHolder(l.Key, l.Owner, now); h != nil && !h.kept {
		h.expires = now.Add(l.TTL)
		return l.TTL, nil
	}
	e := s.live(l.Key, now)
	if e == nil || e.owner != l.Owner || e.kept {
		return 0, driver.ErrNotHeld
	}
	e.expires = now.Add(l.TTL)
	return l.TTL, nil
}

// Keep implements driver.Keeper: the key stays taken for remaining more,
// renewed by nobody (locker.MinHold).
func (d *memDriver) Keep(ctx context.Context, l driver.Lease, remaining time.Duration) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if h := s.sharedHolder(l.Key, l.Owner, now); h != nil {
		h.kept = true
		h.expires = now.Add(remaining)
		return nil
	}
	e := s.live(l.Key, now)
	if e == nil || e.owner != l.Owner {
		return driver.ErrNotHeld
	}
	e.kept = true
	e.expires = now.Add(remaining)
	return nil
}

func (d *memDriver) Release(ctx context.Context, l driver.Lease) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.releaseLocked(l, time.Now())
}

// releaseLocked is Release of l at now. s.mu must be held.
func (s *Store) releaseLocked(l driver.Lease, now time.Time) error {
	if s.releaseShared(l.Key, l.Owner, now) {
		return nil
	}
	e := s.live(l.Key, now)
	if e == nil || e.owner != l.Owner {
		return driver.ErrNotHeld
	}
	delete(s.locks, l.Key)
	s.notifyLocked(l.Key)
	return nil
}

// SetData implements driver.DataSetter: the holder's data changes, its
// hold does not.
func (d *memDriver) SetData(ctx context.Context, l driver.Lease, data []byte) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.live(l.Key, time.Now())
	if e == nil || e.owner != l.Owner || e.kept {
		return driver.ErrNotHeld
	}
	e.data = bytes.Clone(data)
	return nil
}

// Break implements driver.Breaker (locker.ForceUnlock): the key is freed
// whoever holds it, and its waiters are woken.
func (d *memDriver) Break(ctx context.Context, key string) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if sh := s.liveShared(key, now); sh != nil && len(sh.holders) > 0 {
		clear(sh.holders)
		s.notifyLocked(key)
		s.liveShared(key, now) // drops it when empty
		return nil
	}
	if s.live(key, now) == nil {
		return driver.ErrNotHeld
	}
	delete(s.locks, key)
	s.notifyLocked(key)
	return nil
}

// Inspect implements driver.Inspector; Waiters counts the Lockers waiting
// for the key.
func (d *memDriver) Inspect(ctx context.Context, key string) (driver.Status, error) {
	if err := d.check(ctx); err != nil {
		return driver.Status{}, err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statusLocked(key, time.Now()), nil
}

// statusLocked is what the store says of key at now; s.mu is held.
func (s *Store) statusLocked(key string, now time.Time) driver.Status {
	var st driver.Status
	if set := s.subs[key]; set != nil {
		st.Waiters = len(set.chans)
	}
	if e := s.live(key, now); e != nil {
		st.Held, st.Label, st.Token, st.Data = true, e.label, e.token, bytes.Clone(e.data)
		st.Acquired, st.Expires = e.acquired.Round(0), e.expires.Round(0) // wall clock only
	}
	if sh := s.liveShared(key, now); sh != nil {
		st.Waiters = len(sh.waiters)
		if !sh.rw {
			st.Limit = sh.limit
		}
		st.Holders = sh.status()
		if n := len(st.Holders); n > 0 {
			newest := st.Holders[n-1]
			st.Held, st.Label, st.Token = true, newest.Label, newest.Token
			st.Acquired, st.Expires = newest.Acquired, newest.Expires
		}
	}
	return st
}

// Subscribe implements driver.Notifier: releases wake waiters at once.
func (d *memDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := d.check(ctx); err != nil {
		return nil, nil, err
	}
	s := d.store
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	set := s.subs[key]
	if set == nil {
		set = &subSet{chans: make(map[chan struct{}]struct{})}
		s.subs[key] = set
	}
	set.chans[ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(set.chans, ch)
		if len(set.chans) == 0 && s.subs[key] == set {
			delete(s.subs, key)
		}
		s.mu.Unlock()
	}, nil
}

func (d *memDriver) Close() error { return nil }
