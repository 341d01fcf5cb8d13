package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// TryAcquireMulti implements driver.MultiAcquirer: every key under one
// hold of the store's mutex, all or none.
func (d *memDriver) TryAcquireMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, req := range reqs {
		if e := s.live(req.Key, now); e != nil {
			return nil, driver.Held(e.expires.Sub(now))
		}
		if sh := s.liveShared(req.Key, now); sh != nil {
			return nil, fmt.Errorf("%w: the key is %s, not a plain lock", driver.ErrConflict, sh.kind())
		}
	}
	grants := make([]driver.Grant, len(reqs))
	for i, req := range reqs {
		s.seq++
		s.locks[req.Key] = &entry{owner: req.Owner, label: req.Label, token: s.seq, expires: now.Add(req.TTL), acquired: now}
		grants[i] = driver.Grant{Token: s.seq, Validity: req.TTL}
	}
	return grants, nil
}

// ReleaseMulti implements driver.MultiReleaser: every lease released under
// one hold of the store's mutex, each waking its key's waiters.
func (d *memDriver) ReleaseMulti(ctx context.Context, ls []driver.Lease) ([]error, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	errs := make([]error, len(ls))
	for i, l := range ls {
		errs[i] = s.releaseLocked(l, now)
	}
	return errs, nil
}
