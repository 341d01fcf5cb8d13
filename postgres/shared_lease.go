package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// releaseShared ends a shared hold (driver.Driver.Release).
func (d *pgDriver) releaseShared(ctx context.Context, s *shareState) error {
	if err := d.leave(ctx, d.shared.release, s.key, s.owner, s.token); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// keepShared leaves a shared hold in place for remaining, renewed by
// nobody (driver.Keeper.Keep).
func (d *pgDriver) keepShared(ctx context.Context, s *shareState, remaining time.Duration) error {
	n, err := d.q.exec(ctx, d.shared.keep, s.key, s.owner, s.token, ttlMicros(remaining))
	if err != nil {
		return classify(fmt.Errorf("keep: %w", err))
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// breakShared ends every hold on key (driver.Breaker.Break); the waiters
// stay in line.
func (d *pgDriver) breakShared(ctx context.Context, key string) error {
	return d.inShareTx(ctx, key, func(tx runner) (int64, error) {
		return tx.exec(ctx, d.shared.drop+" AND queued = 0", key)
	})
}

// inspectShared reads the holders of a key held by shared holds.
func (d *pgDriver) inspectShared(ctx context.Context, key string) (driver.Status, error) {
	if err := d.checkShared(); err != nil {
		return driver.Status{}, err
	}
	var s driver.Status
	err := d.q.query(ctx, d.shared.inspect, []any{key}, func(scan func(...any) error) error {
		var (
			h              driver.Holder
			mode           int16
			limit          int
			token, queued  int64
			start, expires sql.NullInt64
		)
		if err := scan(&mode, &h.Weight, &limit, &token, &queued, &h.Label, &start, &expires); err != nil {
			return err
		}
		if driver.Mode(mode) == driver.Permits {
			s.Limit = limit
		}
		if queued > 0 {
			s.Waiters++
			return nil
		}
		h.Mode, h.Token, h.Acquired, h.Expires = driver.Mode(mode), uint64(token), utc(start), utc(expires)
		s.Holders = append(s.Holders, h)
		return nil
	})
	if err != nil {
		return driver.Status{}, classify(err)
	}
	if n := len(s.Holders); n > 0 {
		h := s.Holders[n-1]
		s.Held, s.Label, s.Token, s.Acquired, s.Expires = true, h.Label, h.Token, h.Acquired, h.Expires
	}
	return s, nil
}

// renewMixed renews plain and shared leases in one statement; renewed
// gets the plain ones' rowKey and the shared ones' shareKey. inRow marks
// the first holders that plain includes in their key's row: one that
// neither that row nor the table of shared holds renewed may have moved
// while the statement ran, its row in the table of shared holds committed
// after the statement's snapshot, so a second statement looks there once
// more.
func (d *pgDriver) renewMixed(ctx context.Context, plain [4]any, ls []driver.Lease, inRow []bool, renewedPlain map[rowKey]bool) (map[shareKey]bool, error) {
	if err := d.checkShared(); err != nil {
		return nil, err
	}
	renewed := make(map[shareKey]bool)
	run := func(plain [4]any, pick func(int, *shareState) bool) error {
		var keys, owners []string
		var tokens, ttls []int64
		for i, l := range ls {
			if s, ok := l.State.(*shareState); ok && pick(i, s) {
				keys, owners, tokens, ttls = append(keys, s.key), append(owners, s.owner), append(tokens, s.token), append(ttls, ttlMicros(l.TTL))
			}
		}
		if len(keys) == 0 {
			return nil
		}
		return d.renewQuery(ctx, d.shared.renew, []any{plain[0], plain[1], plain[2], plain[3], keys, owners, tokens, ttls},
			func(scan func(...any) error) error {
				var (
					shared bool
					r      rowKey
				)
				if err := scan(&shared, &r.key, &r.owner, &r.version); err != nil {
					return err
				}
				if shared {
					renewed[shareKey{key: r.key, owner: r.owner, token: r.version}] = true
				} else {
					renewedPlain[r] = true
				}
				return nil
			})
	}
	if err := run(plain, func(int, *shareState) bool { return true }); err != nil {
		return nil, err
	}
	none := [4]any{[]string{}, []string{}, []int64{}, []int64{}}
	err := run(none, func(i int, s *shareState) bool {
		return inRow[i] && !renewed[s.name()] && !renewedPlain[rowKey{s.key, firstOwner(s.owner), s.token}]
	})
	return renewed, err
}

// name is the hold's name in the table of shared holds.
func (s *shareState) name() shareKey { return shareKey{key: s.key, owner: s.owner, token: s.token} }
