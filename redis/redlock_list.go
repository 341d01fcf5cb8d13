package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

// List implements driver.Lister: a key held by a quorum is on at least one
// of the first len(masters)-quorum+1 masters, which are scanned in turn as
// the single-node List scans. A name found on a master is skipped when an
// earlier scanned master has it too (it was listed there), and each other
// key is read as Inspect reads it.
func (d *redlockDriver) List(ctx context.Context, prefix, cursor string, limit int) ([]driver.KeyStatus, string, error) {
	scanned := d.masters[:len(d.masters)-d.quorum+1]
	nodes := make([]scanFunc, len(scanned))
	for i, m := range scanned {
		nodes[i] = pipelineScan(m)
	}
	names, form, node, next, err := scanPage(ctx, nodes, prefix, cursor, limit)
	if err != nil || len(names) == 0 {
		return nil, next, err
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, m := range scanned[:node] {
		if names, err = absentOn(ctx, m, names); err != nil {
			return nil, "", err
		}
	}
	keys := make([]string, 0, len(names))
	for _, n := range names {
		kind := kindLock
		if form >= 2 {
			kind, form = kindShareHolds, form-2
		}
		if key, ok := storeKeyOf(n, kind, form); ok {
			keys = append(keys, key)
		}
	}
	page, err := driver.InspectAll(ctx, d, keys)
	if err != nil {
		return nil, "", err
	}
	return page, next, nil
}

// absentOn returns the names m does not have.
func absentOn(ctx context.Context, m Master, names []string) ([]string, error) {
	pipe := m.Pipeline()
	cmds := make([]*goredis.IntCmd, len(names))
	for i, n := range names {
		cmds[i] = pipe.Exists(ctx, n)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("list: %w", classify(err))
	}
	kept := names[:0]
	for i, n := range names {
		if cmds[i].Val() == 0 {
			kept = append(kept, n)
		}
	}
	return kept, nil
}
