package etcd

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Subscribe implements driver.Notifier, for locker.Watch and the waits of
// shared holds: a watch on the key's directory wakes on every deletion
// there (a release, an expired lease, a waiter that left), and a watch on
// its limit record (limit.go) on every change of the limit. The engine's
// waits for a plain lock go through Acquire and do not use it. The watches
// are established when Subscribe returns, so that no change after it is
// missed. A watch that fails later ends the wake-ups; the engine's polling
// goes on. The queued shared requests of the directory keep their view of
// the queue through them (sharedview.go).
//
// The subscriptions of one directory share these watches, which outlive
// the last of them by a third of the TTL: a holder that queues again at
// once, as a worker looping on a semaphore does, finds them there.
func (d *etcdDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	dir := Dir(key)
	ch := make(chan struct{}, 1)
	d.mu.Lock()
	for sub := range d.subs[dir] {
		if sub.live {
			sub.join(ch)
			d.mu.Unlock()
			return ch, func() { d.leave(sub, ch) }, nil
		}
	}
	d.mu.Unlock()

	// The watches outlive ctx, which bounds only their creation.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(ctx)))
	unbound := context.AfterFunc(ctx, cancel)
	wch := d.cli.Watch(wctx, dir, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	lch := d.cli.Watch(wctx, limitKeyOf(dir), clientv3.WithCreatedNotify())
	stop := func() {
		cancel()
		for range wch { // closed once the watch has ended
		}
		for range lch {
		}
	}
	var created int64
	for _, w := range []clientv3.WatchChan{wch, lch} {
		select {
		case resp, ok := <-w:
			if ok && resp.Created && resp.Err() == nil {
				created = max(created, resp.Header.Revision)
				continue
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
	}
	if !unbound() {
		stop()
		return nil, nil, ctx.Err()
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		stop()
		return nil, nil, errors.New("etcd: the Locker is closed")
	}
	sub := d.subscribe(dir, created)
	sub.stop = cancel
	sub.join(ch)
	d.watchers.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.watchers.Done()
		defer d.unsubscribe(sub)
		defer stop()
		for {
			select {
			case resp, ok := <-wch:
				if !ok || resp.Err() != nil {
					return
				}
				d.seeDeletions(sub, resp.Events)
			case resp, ok := <-lch:
				if !ok || resp.Err() != nil {
					return
				}
				d.seeLimit(sub, resp.Events)
			}
		}
	}()
	return ch, func() { d.leave(sub, ch) }, nil
}

// join adds ch to sub's subscribers. The caller holds mu.
func (sub *dirSub) join(ch chan struct{}) {
	sub.chans[ch] = struct{}{}
	if sub.idle != nil {
		sub.idle.Stop()
		sub.idle = nil
	}
}

// leave removes ch from sub's subscribers; the watch ends a third of the
// TTL after its last subscriber left, unless another joins.
func (d *etcdDriver) leave(sub *dirSub, ch chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := sub.chans[ch]; !ok {
		return
	}
	delete(sub.chans, ch)
	if len(sub.chans) > 0 || !sub.live {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d.ttl/3, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if sub.idle == t {
			sub.live = false
			sub.stop()
		}
	})
	sub.idle = t
}
