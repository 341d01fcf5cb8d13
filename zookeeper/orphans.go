package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"
)

// orphan is a node of ours that must be deleted: a waiter or holder whose
// cleanup failed, or whose create was still in flight when its caller gave
// up.
type orphan struct {
	parent string
	guid   string
	path   string                            // "" when unknown: search the parent for guid
	create <-chan result[[]zk.MultiResponse] // non-nil while the create is in flight
}

// cleanup deletes our node (node, or the one carrying guid under parent when
// node is "") with a fresh bounded context, and leaves it to the janitor when
// that fails. It returns when the deletion is done or ctx ends, whichever
// comes first: the deletion goes on after ctx, and Close waits for it.
func (d *zkDriver) cleanup(ctx context.Context, parent, guid, node string) {
	done := make(chan struct{})
	d.cleanups.add()
	go func() {
		defer d.cleanups.done()
		defer close(done)
		cctx, cancel := d.cleanupContext(ctx)
		defer cancel()
		o := &orphan{parent: parent, guid: guid, path: node}
		if err := d.deleteOrphan(cctx, o); err != nil {
			d.logger.Warn("locker: zookeeper cleanup failed, retrying in the background", "parent", parent, "node", node, "err", err)
			d.addOrphan(o)
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// deleteOrphan deletes o's node, finding it by its GUID when its path is
// unknown. A node that is already gone is fine.
func (d *zkDriver) deleteOrphan(ctx context.Context, o *orphan) error {
	node := o.path
	if node == "" {
		children, err := call(ctx, d, func() ([]string, error) {
			c, _, err := d.conn.Children(o.parent)
			return c, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", o.parent, err)
		}
		for _, c := range children {
			if strings.HasPrefix(c, protectedPrefix+o.guid+lockMarker) {
				node = o.parent + "/" + c
				break
			}
		}
		if node == "" {
			return nil
		}
	}
	err := call0(ctx, d, func() error { return d.conn.Delete(node, -1) })
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	o.path = node
	return fmt.Errorf("delete %s: %w", node, denied(err, o.parent, "DELETE"))
}

func (d *zkDriver) addOrphan(o *orphan) {
	d.mu.Lock()
	d.orphans = append(d.orphans, o)
	d.mu.Unlock()
}
