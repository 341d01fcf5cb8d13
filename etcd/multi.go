package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/driver"
)

// TryAcquireMulti implements driver.MultiAcquirer: one transaction creates
// every waiter key when every key's directory is empty. The keys share the
// transaction's revision, each key's fencing token. More than batchOps keys,
// or more than the server takes in one transaction, answer
// driver.ErrNotAtomic.
func (d *etcdDriver) TryAcquireMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	gs, err := d.tryAcquireMulti(ctx, reqs)
	return gs, d.classify(err)
}

func (d *etcdDriver) tryAcquireMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	if len(reqs) > batchOps {
		return nil, fmt.Errorf("%w: %d keys, at most %d in one transaction", driver.ErrNotAtomic, len(reqs), batchOps)
	}
	for attempt := 0; ; attempt++ {
		s, err := d.session(ctx)
		if err != nil {
			return nil, err
		}
		sts := make([]*lockState, len(reqs))
		cmps := make([]clientv3.Cmp, len(reqs))
		puts := make([]clientv3.Op, len(reqs))
		for i, req := range reqs {
			sts[i] = d.newState(s, req, false)
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(sts[i].dir), "=", 0).WithPrefix()
			puts[i] = clientv3.OpPut(sts[i].key, sts[i].value, clientv3.WithLease(s.id))
		}
		tctx, cancel := detached(ctx)
		resp, err := d.cli.Txn(tctx).If(cmps...).Then(puts...).Commit()
		cancel()
		if err != nil {
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0:
				d.kill(s, fmt.Errorf("%w: %w", ErrLeaseLost, err))
				continue
			case errors.Is(err, rpctypes.ErrTooManyOps):
				return nil, fmt.Errorf("%w: %w", driver.ErrNotAtomic, err)
			}
			return nil, d.undoMulti(ctx, sts, nil, err)
		}
		if !resp.Succeeded {
			return nil, driver.Held(0)
		}
		grants := make([]driver.Grant, len(sts))
		for i, st := range sts {
			st.rev = resp.Header.Revision
			if grants[i], err = d.grant(ctx, st); err != nil {
				// grant removed st's key; the others go too.
				return nil, d.undoMulti(ctx, append(sts[:i:i], sts[i+1:]...), grants[:i], err)
			}
		}
		return grants, nil
	}
}

// undoMulti removes the keys of sts after a failed multi-key acquisition
// and returns cause: the first len(granted) were granted, and are
// released; the others are cleaned up as a failed TryAcquire's key, after
// a transaction of unknown outcome when granted is nil. When some could not
// be removed, cause comes in a driver.Residue that retries them.
func (d *etcdDriver) undoMulti(ctx context.Context, sts []*lockState, granted []driver.Grant, cause error) error {
	var left []func(context.Context) error
	for i, st := range sts {
		if i < len(granted) {
			release := func(ctx context.Context) error {
				err := d.Release(ctx, driver.Lease{Key: st.key, Token: granted[i].Token, State: st})
				if errors.Is(err, driver.ErrNotHeld) {
					return nil
				}
				return err
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			if release(cctx) != nil {
				left = append(left, release)
			}
			cancel()
			continue
		}
		var r *driver.Residue
		if errors.As(d.cleanup(ctx, st, granted != nil, cause), &r) {
			left = append(left, r.Cleanup)
		}
	}
	if len(left) == 0 {
		return cause
	}
	return &driver.Residue{Err: cause, Cleanup: func(ctx context.Context) error {
		var errs []error
		for _, f := range left {
			if err := f(ctx); err != nil && !errors.Is(err, driver.ErrNotHeld) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}}
}
