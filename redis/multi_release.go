package redis

import (
	"context"
	"fmt"

	"github.com/golocker/locker/driver"
)

// ReleaseMulti implements driver.MultiReleaser: one pipeline of release.lua
// calls, one per lease (on a Cluster, go-redis sends one pipeline per node).
// Each hands its key over or wakes its waiters as Release does. A shared
// hold's lease is released on its own.
func (d *redisDriver) ReleaseMulti(ctx context.Context, ls []driver.Lease) ([]error, error) {
	errs := make([]error, len(ls))
	calls := make([]evalCall, 0, len(ls))
	idx := make([]int, 0, len(ls)) // calls[j] releases ls[idx[j]]
	for i, l := range ls {
		if isShared(l) {
			errs[i] = d.releaseShared(ctx, l)
			continue
		}
		calls = append(calls, evalCall{script: d.release, keys: scriptKeys(l.Key)[:4],
			args: []any{l.Owner, d.channelArg(l.Key), d.retentionArg, "0", d.unfairArg}})
		idx = append(idx, i)
	}
	if len(calls) == 0 {
		return errs, nil
	}
	for j, c := range evalPipelined(ctx, d.client, calls) {
		n, err := c.Int64()
		if n == 2 {
			d.noPubSub(errPublishRefused)
			n = 1
		}
		switch {
		case err != nil:
			errs[idx[j]] = fmt.Errorf("release: %w", classify(err))
		case n == 0:
			errs[idx[j]] = fmt.Errorf("release: %w", driver.ErrNotHeld)
		}
	}
	return errs, nil
}
