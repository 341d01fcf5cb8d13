package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// List implements driver.Lister: ZooKeeper has no paged read of children,
// so each page reads the names of the root's children, keeps the store keys
// under prefix after the cursor (the last key of the previous page) in key
// order, and reads at most limit of them as Inspect does.
func (d *zkDriver) List(ctx context.Context, prefix, cursor string, limit int) ([]driver.KeyStatus, string, error) {
	names, err := call(ctx, d, func() ([]string, error) {
		c, _, err := d.conn.Children(d.root)
		return c, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("zookeeper: list %s: %w", d.root, classify(err))
	}
	keys, next := driver.Page(func(yield func(string) bool) {
		for _, n := range names {
			k, err := unescapeKey(n)
			if err == nil && strings.HasPrefix(k, prefix) && !yield(k) {
				return
			}
		}
	}, cursor, limit)
	page, err := driver.InspectAll(ctx, d, keys)
	if err != nil {
		return nil, "", err
	}
	return page, next, nil
}
