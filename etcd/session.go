package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
)

// session is one etcd lease of the Locker. Fields are guarded by
// etcdDriver.mu.
type session struct {
	id    clientv3.LeaseID
	hex   string        // id in hex: the last part of its waiter keys
	ttl   time.Duration // as granted by the server
	sent  time.Time     // send time of the last successful grant or keep-alive
	dead  error         // set once the lease is gone
	locks map[*lockState]struct{}
	// dirs are the key directories of the locks, each with its watch
	// (keywatch.go).
	dirs map[string]*keyDir
	// orphans are waiter keys left by failed releases and waits, and by
	// locks past their deadline. They are deleted before the lease is kept
	// alive again: a live lease must not keep a forgotten key alive.
	orphans []orphan
	// shares are the names of the keys of the session's shared requests
	// not known to be deleted, by owner token; named holds those names
	// (sharename.go).
	shares map[string]*shareName
	named  map[string]bool
}

// expiry is the earliest moment etcd may expire the lease.
func (s *session) expiry() time.Time { return s.sent.Add(s.ttl) }

// orphan is a waiter key to delete if it still has its value.
type orphan struct{ key, value string }

func (d *etcdDriver) acquireSem(ctx context.Context) error {
	select {
	case d.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *etcdDriver) releaseSem() { <-d.sem }

// grantLocked grants a new lease and makes it the live one. The caller
// holds sem.
func (d *etcdDriver) grantLocked(ctx context.Context) (*session, error) {
	sent := time.Now()
	resp, err := d.cli.Grant(ctx, d.ttlSec)
	if err != nil {
		return nil, err
	}
	s := &session{
		id:    resp.ID,
		hex:   strconv.FormatInt(int64(resp.ID), 16),
		ttl:   time.Duration(resp.TTL) * time.Second,
		sent:  sent,
		locks: map[*lockState]struct{}{},
		dirs:  map[string]*keyDir{},
	}
	d.mu.Lock()
	old := d.sess
	d.sess = s
	d.mu.Unlock()
	if old != nil {
		// Not reached in practice: a lease is replaced only once lost.
		d.kill(old, ErrLeaseLost)
	}
	return s, nil
}

// session returns the live lease, kept alive within the last TTL/3,
// granting a new one when there is none or it was lost.
func (d *etcdDriver) session(ctx context.Context) (*session, error) {
	if s := d.fresh(); s != nil {
		return s, nil
	}
	if err := d.acquireSem(ctx); err != nil {
		return nil, err
	}
	defer d.releaseSem()
	if s := d.fresh(); s != nil {
		return s, nil
	}
	d.mu.Lock()
	s := d.sess
	d.mu.Unlock()
	if s != nil {
		err := d.keepAliveLocked(ctx, s)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, ErrLeaseLost) {
			return nil, err
		}
	}
	return d.grantLocked(ctx)
}

// fresh returns the live lease if it was kept alive within the last TTL/3.
func (d *etcdDriver) fresh() *session {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.sess; s != nil && time.Since(s.sent) < d.ttl/3 {
		return s
	}
	return nil
}

// refresh keeps s alive unless that was done within the last maxAge. It
// returns an error matching ErrLeaseLost when the lease is gone.
func (d *etcdDriver) refresh(ctx context.Context, s *session, maxAge time.Duration) error {
	check := func() (bool, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		return time.Since(s.sent) < maxAge, s.dead
	}
	if ok, dead := check(); dead != nil || ok {
		return dead
	}
	if err := d.acquireSem(ctx); err != nil {
		return err
	}
	defer d.releaseSem()
	if ok, dead := check(); dead != nil || ok {
		return dead
	}
	return d.keepAliveLocked(ctx, s)
}

// keepAliveLocked sends one keep-alive for s, after deleting its orphans.
// The caller holds sem.
func (d *etcdDriver) keepAliveLocked(ctx context.Context, s *session) error {
	if err := d.flushOrphans(ctx, s); err != nil {
		return err
	}
	sent := time.Now()
	resp, err := d.cli.KeepAliveOnce(ctx, s.id)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			cause := fmt.Errorf("%w: %w", ErrLeaseLost, err)
			d.kill(s, cause)
			return cause
		}
		return err
	}
	d.mu.Lock()
	if s.dead == nil {
		s.sent = sent
		s.ttl = time.Duration(resp.TTL) * time.Second
	}
	d.mu.Unlock()
	return nil
}

// flushOrphans deletes s's orphans, after adding to them the locks past
// their deadline: the engine counts those as lost and will not release them.
// The caller holds sem.
func (d *etcdDriver) flushOrphans(ctx context.Context, s *session) error {
	now := time.Now()
	var lost []*lockState
	d.mu.Lock()
	for st := range s.locks {
		if now.After(st.validUntil) {
			s.untrack(st)
			lost = append(lost, st)
			value, _ := st.now()
			s.orphans = append(s.orphans, orphan{st.key, value})
		}
	}
	todo := s.orphans
	d.mu.Unlock()
	for _, st := range lost {
		st.lost(fmt.Errorf("etcd: %w", locker.ErrNoRenewal))
	}
	for len(todo) > 0 {
		n := min(len(todo), batchOps)
		// One key may be listed twice (a wait whose outcome was unknown);
		// a transaction must not name it twice.
		seen := make(map[orphan]bool, n)
		ops := make([]clientv3.Op, 0, n)
		for _, o := range todo[:n] {
			if !seen[o] {
				seen[o] = true
				ops = append(ops, deleteIfValue(o.key, o.value))
			}
		}
		if _, err := d.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("etcd: delete abandoned waiter keys: %w", err)
		}
		d.mu.Lock()
		if s.dead == nil {
			s.orphans = s.orphans[n:]
		}
		d.mu.Unlock()
		todo = todo[n:]
	}
	return nil
}

// orphan hands st's key to the next keep-alive for deletion.
func (d *etcdDriver) orphan(st *lockState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st.sess.dead == nil {
		st.sess.orphans = append(st.sess.orphans, orphan{st.key, st.value})
	}
}

// kill marks s as lost and reports every lock on it as lost.
func (d *etcdDriver) kill(s *session, cause error) {
	d.mu.Lock()
	if s.dead != nil {
		d.mu.Unlock()
		return
	}
	s.dead = cause
	if d.sess == s {
		d.sess = nil
	}
	locks := s.locks
	s.stopWatches()
	s.locks, s.orphans = nil, nil // the keys went with the lease
	d.mu.Unlock()
	for st := range locks {
		st.lost(cause)
	}
}

// revoke revokes s best-effort, bounded by ctx: when it fails the lease
// expires by itself.
func (d *etcdDriver) revoke(ctx context.Context, s *session) {
	// Past the TTL the lease is gone anyway.
	ctx, cancel := context.WithTimeout(ctx, min(max(d.ttl, time.Second), cleanupTimeout))
	defer cancel()
	_, _ = d.cli.Revoke(ctx, s.id)
	d.kill(s, ErrLeaseLost)
}
