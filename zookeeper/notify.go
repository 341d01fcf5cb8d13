package zookeeper

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// Subscribe implements driver.Notifier, for locker.Watch and the waits of
// shared holds: a children watch on the key's node, armed again after each
// event, wakes on every change of its queue (a release, an expired session,
// a waiter that came or left). The engine's waits for a plain lock go
// through Acquire and do not use it. The first watch is armed when
// Subscribe returns, so that no change after it is missed. A watch that
// fails later ends the wake-ups; the engine's polling goes on.
func (d *zkDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	parent := d.parentOf(key)
	arm := func(ctx context.Context) (<-chan zk.Event, error) {
		for {
			ev, err := call(ctx, d, func() (<-chan zk.Event, error) {
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
			if err != nil || ev != nil {
				return ev, err
			}
		}
	}
	ev, err := arm(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("zookeeper: watch %s: %w", parent, classify(denied(err, parent, "READ")))
	}
	wctx, cancel := context.WithCancel(ctx)
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ev:
				select {
				case ch <- struct{}{}:
				default:
				}
			case <-wctx.Done():
				return
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
