package zookeeper

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"
)

// Subscribe implements driver.Notifier, for locker.Watch: a children watch
// on the key's node, armed again after each event, wakes on every change of
// its queue (a release, an expired session, a waiter that came or left).
// The engine's own waits go through Acquire and do not use it. A watch that
// fails ends the wake-ups; the engine's polling goes on.
func (d *zkDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	parent := d.parentOf(key)
	wctx, cancel := context.WithCancel(ctx)
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := call(wctx, d, func() (<-chan zk.Event, error) {
				_, _, ev, err := d.conn.ChildrenW(parent)
				if errors.Is(err, zk.ErrNoNode) {
					// No lock taken yet: wait for the key's node.
					var ok bool
					ok, _, ev, err = d.conn.ExistsW(parent)
					if err == nil && ok {
						return nil, nil // created meanwhile: arm the children watch
					}
				}
				return ev, err
			})
			if err != nil {
				return
			}
			if ev == nil {
				continue
			}
			select {
			case <-ev:
				select {
				case ch <- struct{}{}:
				default:
				}
			case <-wctx.Done():
				return
			}
		}
	}()
	return ch, func() { cancel(); <-done }, nil
}
