package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// Inspect implements driver.Inspector: the lock node with the lowest
// sequence under the key's node is the holder's (data: its label; czxid: its
// token; ctime: when it was taken, on the server's clock), the others are
// queued waiters. A holder's node lives as long as its session: Expires is
// zero.
func (d *zkDriver) Inspect(ctx context.Context, key string) (driver.Status, error) {
	parent := d.parentOf(key)
	children, err := call(ctx, d, func() ([]string, error) {
		c, _, err := d.conn.Children(parent)
		return c, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return driver.Status{}, nil
	}
	if err != nil {
		return driver.Status{}, fmt.Errorf("zookeeper: list %s: %w", parent, err)
	}
	first, n := head(children)
	if first == "" {
		return driver.Status{}, nil
	}
	if q := queueOf(children); !q[0].plain {
		return d.inspectShared(ctx, parent, q, recordsOf(children))
	}
	type node struct {
		data []byte
		stat *zk.Stat
	}
	got, err := call(ctx, d, func() (node, error) {
		data, stat, err := d.conn.Get(parent + "/" + first)
		return node{data, stat}, err
	})
	data, stat := got.data, got.stat
	if errors.Is(err, zk.ErrNoNode) {
		return driver.Status{Waiters: n - 1}, nil // released meanwhile
	}
	if err != nil {
		return driver.Status{}, fmt.Errorf("zookeeper: read %s/%s: %w", parent, first, err)
	}
	label, value := labelAndData(data)
	return driver.Status{Held: true, Label: label, Data: value, Token: uint64(stat.Czxid),
		Acquired: time.UnixMilli(stat.Ctime).UTC(), Waiters: n - 1}, nil
}

// Break implements driver.Breaker (locker.ForceUnlock): the holder's node
// (the lowest sequence under the key's node) is deleted; the next waiter's
// watch and the holder's own see it go.
func (d *zkDriver) Break(ctx context.Context, key string) error {
	parent := d.parentOf(key)
	children, err := call(ctx, d, func() ([]string, error) {
		c, _, err := d.conn.Children(parent)
		return c, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return driver.ErrNotHeld
	}
	if err != nil {
		return fmt.Errorf("zookeeper: list %s: %w", parent, classify(err))
	}
	first, _ := head(children)
	if first == "" {
		return driver.ErrNotHeld
	}
	if q := queueOf(children); !q[0].plain {
		return d.breakShared(ctx, parent, q)
	}
	err = call0(ctx, d, func() error { return d.conn.Delete(parent+"/"+first, -1) })
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: %s/%s was released meanwhile", driver.ErrNotHeld, parent, first)
	}
	if err != nil {
		return fmt.Errorf("zookeeper: delete %s/%s: %w", parent, first, classify(err))
	}
	return nil
}
