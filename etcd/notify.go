package etcd

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Subscribe implements driver.Notifier, for locker.Watch and the waits of
// shared holds: a watch on the key's directory wakes on every deletion
// there (a release, an expired lease, a waiter that left). The engine's
// waits for a plain lock go through Acquire and do not use it. The watch is
// established when Subscribe returns, so that no deletion after it is
// missed. A watch that fails later ends the wake-ups; the engine's polling
// goes on. The queued shared requests of the directory keep their view of
// the queue through it (sharedview.go).
func (d *etcdDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := d.cli.Watch(wctx, Dir(key), clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	stop := func() {
		cancel()
		for range wch { // closed once the watch has ended
		}
	}
	var created int64
	select {
	case resp, ok := <-wch:
		if ok && resp.Created && resp.Err() == nil {
			created = resp.Header.Revision
			break
		}
		stop()
		err := errors.New("etcd: watch ended before it was established")
		if ok && resp.Err() != nil {
			err = resp.Err()
		}
		return nil, nil, d.classify(err)
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	}
	d.mu.Lock()
	sub := d.subscribe(Dir(key), created)
	d.mu.Unlock()
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer d.unsubscribe(sub)
		for resp := range wch {
			if resp.Err() != nil {
				return
			}
			d.seeDeletions(sub, resp.Events)
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch, func() { cancel(); <-done }, nil
}
