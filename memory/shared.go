package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/golocker/locker/driver"
)

// shared is the state of a key held by shared holds: a semaphore's
// permits, or a read-write lock's holds. It lives while it has holders or
// waiters.
type shared struct {
	rw      bool // a read-write lock; else a semaphore of limit permits
	limit   int
	holders map[string]*shareHolder // by owner token
	// waiters are the requests waiting in line (driver.Share.Queue), in
	// the order they arrived.
	waiters []*shareWaiter
}

type shareHolder struct {
	mode     driver.Mode
	weight   int
	label    string
	token    uint64
	expires  time.Time // monotonic
	acquired time.Time
	kept     bool // given up with a MinHold left: held until expires
}

type shareWaiter struct {
	owner   string
	mode    driver.Mode
	weight  int
	expires time.Time // the record's end unless the waiter tries again
}

// kind names the use of a key, for conflict errors.
func (sh *shared) kind() string {
	if sh.rw {
		return "a read-write lock"
	}
	return fmt.Sprintf("a semaphore of %d permits", sh.limit)
}

// liveShared returns the key's shared state without its expired holders
// and waiters, or nil when nothing of it is left.
func (s *Store) liveShared(key string, now time.Time) *shared {
	sh := s.shares[key]
	if sh == nil {
		return nil
	}
	gone := false
	for owner, h := range sh.holders {
		if !now.Before(h.expires) {
			delete(sh.holders, owner)
			gone = true
		}
	}
	n := len(sh.waiters)
	sh.waiters = slices.DeleteFunc(sh.waiters, func(w *shareWaiter) bool { return !now.Before(w.expires) })
	if gone || len(sh.waiters) < n {
		s.notifyLocked(key) // permits back, or the line moved
	}
	if len(sh.holders) == 0 && len(sh.waiters) == 0 {
		delete(s.shares, key)
		return nil
	}
	return sh
}

// fits reports whether a hold of mode and weight fits beside sh's holders.
func (sh *shared) fits(mode driver.Mode, weight int) bool {
	used := 0
	for _, h := range sh.holders {
		switch {
		case mode == driver.Write, h.mode == driver.Write:
			return false
		}
		used += h.weight
	}
	return mode != driver.Permits || used+weight <= sh.limit
}

// behind reports whether a request of mode must wait for the waiters
// before it in line (all of them when it is not in line): every earlier
// waiter for permits or a write hold, an earlier writer for a read hold.
func (sh *shared) behind(idx int, mode driver.Mode) bool {
	ahead := sh.waiters
	if idx >= 0 {
		ahead = sh.waiters[:idx]
	}
	for _, w := range ahead {
		if mode != driver.Read || w.mode == driver.Write {
			return true
		}
	}
	return false
}

// nextExpiry is how long until the first holder's claim ends (0: none).
func (sh *shared) nextExpiry(now time.Time) time.Duration {
	var d time.Duration
	for _, h := range sh.holders {
		if r := h.expires.Sub(now); d == 0 || r < d {
			d = r
		}
	}
	return d
}

// TryAcquireShared implements driver.Sharer: permits with weights, and read
// and write holds, granted in the order their waiters lined up.
func (d *memDriver) TryAcquireShared(ctx context.Context, req driver.Request, share driver.Share) (driver.Grant, error) {
	if err := d.check(ctx); err != nil {
		return driver.Grant{}, err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.live(req.Key, now) != nil {
		return driver.Grant{}, fmt.Errorf("%w: the key is a plain lock, not %s", driver.ErrConflict, shareKind(share))
	}
	sh := s.liveShared(req.Key, now)
	if sh == nil {
		sh = &shared{rw: share.Mode != driver.Permits, limit: share.Limit, holders: make(map[string]*shareHolder)}
		s.shares[req.Key] = sh
	}
	switch {
	case sh.rw != (share.Mode != driver.Permits):
		return driver.Grant{}, s.conflict(req.Key, sh, fmt.Errorf("%w: the key is %s, not %s", driver.ErrConflict, sh.kind(), shareKind(share)))
	case sh.limit != share.Limit:
		return driver.Grant{}, s.conflict(req.Key, sh, fmt.Errorf("%w: the key is a semaphore of %d permits, not %d", driver.ErrConflict, sh.limit, share.Limit))
	}
	idx := slices.IndexFunc(sh.waiters, func(w *shareWaiter) bool { return w.owner == req.Owner })
	if sh.fits(share.Mode, share.Weight) && !sh.behind(idx, share.Mode) {
		if idx >= 0 {
			sh.waiters = slices.Delete(sh.waiters, idx, idx+1)
			s.notifyLocked(req.Key) // the next in line may go
		}
		s.seq++
		sh.holders[req.Owner] = &shareHolder{mode: share.Mode, weight: share.Weight, label: req.Label, token: s.seq,
			expires: now.Add(req.TTL), acquired: now}
		return driver.Grant{Token: s.seq, Validity: req.TTL}, nil
	}
	remaining := sh.nextExpiry(now)
	if !share.Queue {
		if len(sh.holders) == 0 && len(sh.waiters) == 0 {
			delete(s.shares, req.Key)
		}
		return driver.Grant{}, driver.Held(remaining)
	}
	if idx >= 0 {
		sh.waiters[idx].expires = now.Add(req.TTL)
	} else {
		sh.waiters = append(sh.waiters, &shareWaiter{owner: req.Owner, mode: share.Mode, weight: share.Weight, expires: now.Add(req.TTL)})
	}
	// Back before the record expires.
	if r := req.TTL / 3; remaining <= 0 || remaining > r {
		remaining = r
	}
	key, owner := req.Key, req.Owner
	return driver.Grant{}, &driver.Residue{Err: driver.Held(remaining), Cleanup: func(ctx context.Context) error {
		return d.withdraw(ctx, key, owner)
	}}
}

// conflict returns err, first dropping sh when the refused request made it.
func (s *Store) conflict(key string, sh *shared, err error) error {
	if len(sh.holders) == 0 && len(sh.waiters) == 0 {
		delete(s.shares, key)
	}
	return err
}

// withdraw removes owner's place in key's line.
func (d *memDriver) withdraw(ctx context.Context, key, owner string) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.liveShared(key, time.Now())
	if sh == nil {
		return driver.ErrNotHeld
	}
	idx := slices.IndexFunc(sh.waiters, func(w *shareWaiter) bool { return w.owner == owner })
	if idx < 0 {
		return driver.ErrNotHeld
	}
	sh.waiters = slices.Delete(sh.waiters, idx, idx+1)
	s.notifyLocked(key)
	s.liveShared(key, time.Now()) // drops it when empty
	return nil
}

func shareKind(s driver.Share) string {
	if s.Mode == driver.Permits {
		return fmt.Sprintf("a semaphore of %d permits", s.Limit)
	}
	return "a read-write lock"
}

// sharedHolder returns owner's live hold on key, or nil.
func (s *Store) sharedHolder(key, owner string, now time.Time) *shareHolder {
	if sh := s.liveShared(key, now); sh != nil {
		return sh.holders[owner]
	}
	return nil
}

// releaseShared ends owner's hold on key; it reports whether there was one.
func (s *Store) releaseShared(key, owner string, now time.Time) bool {
	sh := s.liveShared(key, now)
	if sh == nil || sh.holders[owner] == nil {
		return false
	}
	delete(sh.holders, owner)
	s.notifyLocked(key)
	s.liveShared(key, now) // drops it when empty
	return true
}

// status lists the holders, oldest first, for Inspect (wall clock only).
func (sh *shared) status() []driver.Holder {
	hs := make([]driver.Holder, 0, len(sh.holders))
	for _, h := range sh.holders {
		hs = append(hs, driver.Holder{Mode: h.mode, Weight: h.weight, Label: h.label, Token: h.token,
			Acquired: h.acquired.Round(0), Expires: h.expires.Round(0)})
	}
	slices.SortFunc(hs, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return hs
}

// SetLimit implements driver.Limiter: the key's semaphore, if it has
// holders or waiters, gets limit permits, and its waiters are woken.
func (d *memDriver) SetLimit(ctx context.Context, key string, limit int) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.live(key, now) != nil {
		return fmt.Errorf("%w: the key is a plain lock, not a semaphore", driver.ErrConflict)
	}
	sh := s.liveShared(key, now)
	switch {
	case sh == nil:
		return nil
	case sh.rw:
		return fmt.Errorf("%w: the key is a read-write lock, not a semaphore", driver.ErrConflict)
	}
	sh.limit = limit
	s.notifyLocked(key)
	return nil
}
