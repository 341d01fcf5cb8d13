package zookeeper

import (
	"context"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// Subscribe implements driver.Notifier for the waits of shared holds (a
// plain Lock waits in Acquire): a watch of the children of key's node, set
// again after each event, which is where permits and holds come back. The
// watch is set when Subscribe returns. A watch that cannot be set again
// ends the notifications, and the wait polls.
func (d *zkDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	parent := d.parentOf(key)
	arm := func(ctx context.Context) (<-chan zk.Event, error) {
		return call(ctx, d, func() (<-chan zk.Event, error) {
			_, _, ev, err := d.conn.ChildrenW(parent)
			return ev, err
		})
	}
	ev, err := arm(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("watch the queue %s: %w", parent, classify(denied(err, parent, "READ")))
	}
	wctx, cancel := context.WithCancel(ctx)
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ev:
			case <-wctx.Done():
				return
			}
			select {
			case ch <- struct{}{}:
			default:
			}
			next, err := arm(wctx)
			if err != nil {
				return
			}
			ev = next
		}
	}()
	return ch, func() { cancel(); <-done }, nil
}
