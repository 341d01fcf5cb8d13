package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/driver"
)

// A lock whose TTL differs from the Locker's (locker.TTL, or a MinHold that
// lengthens it) has a lease of its own: its key is queued and taken on the
// Locker's lease, then moved onto a lease of the asked TTL before the grant
// is reported. Each renewal keeps the key on a lease that lasts the asked
// TTL from the renewal: the lease it has when that one already lasts long
// enough (a MinHold's TTL only shrinks), the same lease kept alive when the
// TTL did not change, or else a new one; and the key moves back onto the
// Locker's lease once the asked TTL is the Locker's. Every move is a
// transaction guarded by the key's create revision, so it never touches
// another acquisition's key and keeps the key's place and fencing token.

// ownLease is the lease of one lock that has a TTL of its own. Its fields
// are set once.
type ownLease struct {
	id   clientv3.LeaseID
	ttl  time.Duration // as granted by the server
	sent time.Time     // send time of its grant or last keep-alive
}

// expiry is the earliest moment etcd may expire the lease.
func (o *ownLease) expiry() time.Time { return o.sent.Add(o.ttl) }

// leaseSeconds is d in whole seconds, rounded up: etcd's lease unit.
func leaseSeconds(d time.Duration) int64 { return max(int64((d+time.Second-1)/time.Second), 1) }

// ownLeaseOf returns st's own lease, nil while its key is on the Locker's.
func (d *etcdDriver) ownLeaseOf(st *lockState) *ownLease {
	d.mu.Lock()
	defer d.mu.Unlock()
	return st.own
}

// moveToOwnLease grants a lease of ttl and moves st's key onto it, if the
// key is still st's; the lease it had before, if its own, is revoked.
func (d *etcdDriver) moveToOwnLease(ctx context.Context, st *lockState, ttl time.Duration) (*ownLease, error) {
	sent := time.Now()
	resp, err := d.cli.Grant(ctx, leaseSeconds(ttl))
	if err != nil {
		return nil, err
	}
	o := &ownLease{id: resp.ID, ttl: time.Duration(resp.TTL) * time.Second, sent: sent}
	moved, err := d.moveKey(ctx, st, o.id)
	if err != nil {
		// The key may be on the new lease: it ends with it, and the
		// next renewal, finding it there, reports the lock lost.
		return nil, err
	}
	if !moved {
		d.revokeLease(ctx, o.id) // it holds no key
		return nil, errReplaced(st)
	}
	d.mu.Lock()
	old := st.own
	st.own = o
	d.mu.Unlock()
	if old != nil {
		d.revokeLease(ctx, old.id)
	}
	return o, nil
}

// moveKey puts st's key, with its value, on lease if it still has st's
// create revision; it reports whether it did.
func (d *etcdDriver) moveKey(ctx context.Context, st *lockState, lease clientv3.LeaseID) (bool, error) {
	st.data.write.Lock()
	defer st.data.write.Unlock()
	value, _ := st.now()
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(st.key), "=", st.rev)).
		Then(clientv3.OpPut(st.key, value, clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// revokeLease revokes a lease best-effort, bounded: when it fails the lease
// expires by itself.
func (d *etcdDriver) revokeLease(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	_, _ = d.cli.Revoke(rctx, id)
}

// renewOwn renews a lock whose TTL is not the Locker's, or was not at the
// last renewal, so that etcd keeps its key for ttl from start, and returns
// the validity from start.
func (d *etcdDriver) renewOwn(ctx context.Context, st *lockState, ttl time.Duration, start time.Time) (time.Duration, error) {
	until, err := d.renewOwnLease(ctx, st, ttl, start)
	if err != nil {
		if errors.Is(err, driver.ErrNotHeld) {
			d.forget(st)
		}
		return 0, d.classify(err)
	}
	d.mu.Lock()
	if until.After(st.validUntil) {
		st.validUntil = until
	}
	d.mu.Unlock()
	return until.Sub(start), nil
}

// renewOwnLease is renewOwn's store work: it returns the earliest moment
// etcd may delete st's key.
func (d *etcdDriver) renewOwnLease(ctx context.Context, st *lockState, ttl time.Duration, start time.Time) (time.Time, error) {
	o := d.ownLeaseOf(st)
	switch {
	case ttl == d.ttl && o != nil:
		// Back onto the Locker's lease, kept alive with the other locks.
		s := st.sess
		if err := d.refresh(ctx, s, d.ttl/6); err != nil {
			if errors.Is(err, ErrLeaseLost) {
				return time.Time{}, fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
			}
			return time.Time{}, err
		}
		moved, err := d.moveKey(ctx, st, s.id)
		if err != nil {
			return time.Time{}, err
		}
		if !moved {
			return time.Time{}, errReplaced(st)
		}
		d.mu.Lock()
		st.own = nil
		until := s.expiry()
		d.mu.Unlock()
		d.revokeLease(ctx, o.id)
		return until, nil
	case o != nil && !o.expiry().Before(start.Add(ttl)):
		// The lease lasts long enough (a MinHold's TTL only shrinks).
		return o.expiry(), d.checkOwn(ctx, st, o.id)
	case o != nil && time.Duration(leaseSeconds(ttl))*time.Second == o.ttl:
		sent := time.Now()
		if _, err := d.cli.KeepAliveOnce(ctx, o.id); err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return time.Time{}, fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
			}
			return time.Time{}, err
		}
		// The lease lives, but its key may have been deleted by hand.
		if err := d.checkOwn(ctx, st, o.id); err != nil {
			return time.Time{}, err
		}
		o = &ownLease{id: o.id, ttl: o.ttl, sent: sent}
		d.mu.Lock()
		st.own = o
		d.mu.Unlock()
		return o.expiry(), nil
	}
	n, err := d.moveToOwnLease(ctx, st, ttl)
	if err != nil {
		return time.Time{}, err
	}
	return n.expiry(), nil
}

// checkOwn checks that st's key is still st's, on lease.
func (d *etcdDriver) checkOwn(ctx context.Context, st *lockState, lease clientv3.LeaseID) error {
	resp, err := d.cli.Get(ctx, st.key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != st.rev || clientv3.LeaseID(resp.Kvs[0].Lease) != lease {
		return errReplaced(st)
	}
	return nil
}

// errReplaced is the error of a lock whose key was deleted or replaced.
func errReplaced(st *lockState) error {
	return fmt.Errorf("%w: key %q deleted or replaced", driver.ErrNotHeld, st.key)
}
