package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// ReleaseMulti implements driver.MultiReleaser: one multi-operation deletes
// every lease's node (per 256 KiB of node names, as RenewBatch). ZooKeeper
// applies all of it or none: a deletion it refuses (a node already gone)
// answers for its lease, and the others are sent again without it. Each
// deletion wakes the key's waiters, as Release's does. A lease whose
// deletion had an unknown outcome stays held, as after Release.
func (d *zkDriver) ReleaseMulti(ctx context.Context, ls []driver.Lease) ([]error, error) {
	errs := make([]error, len(ls))
	holds := make([]*hold, len(ls))
	var pending []int
	for i, l := range ls {
		h, err := holdOf(l)
		if err != nil {
			errs[i] = err
			continue
		}
		// As in Release: the deletion its watch sees is no loss.
		h.releasing.Store(true)
		holds[i] = h
		pending = append(pending, i)
	}
	for len(pending) > 0 {
		chunk, res, err := d.multiChunk(ctx, pending, holds, func(p string) any { return &zk.DeleteRequest{Path: p, Version: -1} })
		n := len(chunk)
		if err != nil && len(res) != n {
			// The whole call failed: every deletion left has an unknown
			// outcome.
			for _, i := range pending {
				errs[i] = deleteFailed(holds[i], err)
			}
			break
		}
		if err == nil {
			for _, i := range chunk {
				d.forget(holds[i])
				d.freed(holds[i])
			}
			pending = pending[n:]
			continue
		}
		// Nothing was deleted: the failed deletion answers for its lease,
		// the others go again.
		failed := max(slices.IndexFunc(res, func(r zk.MultiResponse) bool { return r.Error != nil }), 0)
		i := chunk[failed]
		if errors.Is(err, zk.ErrNoNode) {
			d.forget(holds[i])
			errs[i] = fmt.Errorf("%w: %s: %w", driver.ErrNotHeld, holds[i].path, err)
		} else {
			errs[i] = deleteFailed(holds[i], err)
		}
		pending = slices.Delete(slices.Clone(pending), failed, failed+1)
	}
	return errs, nil
}

// deleteFailed is the error of a deletion of h's node that failed with err.
func deleteFailed(h *hold, err error) error {
	return fmt.Errorf("delete %s: %w", h.path, classify(denied(err, path.Dir(h.path), "DELETE")))
}
