package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Subscribe implements driver.Notifier, for locker.Watch: a watch on the
// key's directory wakes on every deletion there (a release, an expired
// lease, a waiter that left). The engine's own waits go through Acquire and
// do not use it. A watch that fails ends the wake-ups; the engine's polling
// goes on.
func (d *etcdDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := d.cli.Watch(wctx, Dir(key), clientv3.WithPrefix(), clientv3.WithFilterPut())
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range wch {
			if resp.Err() != nil {
				return
			}
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch, func() { cancel(); <-done }, nil
}
