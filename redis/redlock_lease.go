package redis

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

// Release implements driver.Driver: compare-and-delete on every master.
// It succeeds when a quorum held the lock; it returns once the outcome is
// settled, the other masters' deletes finishing in the background.
func (d *redlockDriver) Release(ctx context.Context, l driver.Lease) error {
	d.live.Delete(l.Owner)
	ns, errs := fanout(ctx, d, nil, d.detached(), func(ctx context.Context, m Master) (int64, error) {
		return d.release.Run(ctx, m, []string{lockKey(l.Key)}, l.Owner).Int64()
	}, byQuorum(d, isOne), nil)
	return d.result("release", d.count(ones(ns), errs))
}

// Keep implements driver.Keeper (locker.MinHold): compare-and-PEXPIRE to
// remaining on every master; nobody renews the key after that.
func (d *redlockDriver) Keep(ctx context.Context, l driver.Lease, remaining time.Duration) error {
	d.live.Delete(l.Owner) // given up: a late grant is no longer wanted
	ns, errs := fanout(ctx, d, nil, d.detached(), func(ctx context.Context, m Master) (int64, error) {
		return d.renew.Run(ctx, m, []string{lockKey(l.Key)}, l.Owner, millis(remaining)).Int64()
	}, byQuorum(d, isOne), nil)
	return d.result("keep", d.count(ones(ns), errs))
}

// RenewBatch implements driver.BatchRenewer: one pipeline per master, the
// masters in parallel; a lease is renewed when a quorum renewed it.
func (d *redlockDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	// Settled once every lease is: renewed by a quorum, or refused or
	// failed by so many masters that no quorum can renew it.
	settled := func(answered []bool, per [][]*goredis.Cmd, errs []error) bool {
		for j := range ls {
			ok, bad := 0, 0
			for i, a := range answered {
				if !a {
					continue
				}
				if errs[i] != nil { // not asked, or no answer: no commands
					bad++
				} else if n, err := per[i][j].Int64(); err == nil && n == 1 {
					ok++
				} else {
					bad++
				}
			}
			if ok < d.quorum && bad <= len(answered)-d.quorum {
				return false
			}
		}
		return true
	}
	ttls := make([]any, len(ls))
	for i, l := range ls {
		ttls[i] = millis(l.TTL)
	}
	per, perr := fanout(ctx, d, nil, d.detached(), func(ctx context.Context, m Master) ([]*goredis.Cmd, error) {
		return renewPipelined(ctx, d.renewerOf(m), d.renew, ls, func(l driver.Lease) string { return lockKey(l.Key) }, ttls), nil
	}, settled, nil)
	validities := make([]time.Duration, len(ls))
	results := make([]error, len(ls))
	oks := make([]bool, len(d.masters))
	errs := make([]error, len(d.masters))
	for j, l := range ls {
		for i := range d.masters {
			if perr[i] != nil {
				oks[i], errs[i] = false, perr[i]
				continue
			}
			n, err := per[i][j].Int64()
			oks[i], errs[i] = n == 1, err
		}
		if results[j] = d.result("renew", d.count(oks, errs)); results[j] == nil {
			validities[j] = validity(l.TTL)
		} else if errors.Is(results[j], driver.ErrNotHeld) {
			d.live.Delete(l.Owner)
		}
	}
	return validities, results, nil
}
