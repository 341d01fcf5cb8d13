package etcd

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Subscribe implements driver.Notifier for the waits of shared holds (a
// plain Lock waits in Acquire): a watch of the deletions in key's
// directory, which is where permits and holds come back. The watch is
// established when Subscribe returns.
func (d *etcdDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	wctx, cancel := context.WithCancel(ctx)
	wch := d.cli.Watch(wctx, Dir(key), clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	stop := func() {
		cancel()
		for range wch { // closed once the watch has ended
		}
	}
	select {
	case resp, ok := <-wch:
		if ok && resp.Created && resp.Err() == nil {
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
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range wch {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch, func() { cancel(); <-done }, nil
}
