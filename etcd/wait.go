package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/driver"
)

// wait blocks until st's key is first in its directory. pred is the key
// created just before st's.
//
// The predecessor's watch has no start revision: etcd then puts it among its
// synced watchers, which get events at once. A watch from a past revision,
// like concurrency.Mutex's, is served by a catch-up loop that runs every
// 100 ms, and on a busy cluster even a watch from the next revision is in the
// past once it reaches the server. So the watch is created first, and a read
// made after its creation checks that the predecessor is still there: its
// deletion then comes after the watch's start, and is seen at once.
func (d *etcdDriver) wait(ctx context.Context, st *lockState, pred string) error {
	s := st.sess
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// The waiter's own key, which goes with the lease: its deletion ends the
	// wait at once. Like the predecessor's, its watch starts at the current
	// revision (a watch from rev+1 is in the past on a busy cluster: one
	// more watcher for etcd's catch-up loop per waiter that waits past its
	// next run). It is created before the predecessor's, on the same
	// stream, so the check made once that one is created reads our key
	// after this watch started: a deletion the watch missed is seen there.
	// And every check reads our key: none grants the lock without it.
	own := d.cli.Watch(wctx, st.key, clientv3.WithFilterPut())
	tick := time.NewTicker(max(d.ttl/6, 100*time.Millisecond))
	defer tick.Stop()
	var (
		pw      clientv3.WatchChan // watches pred; nil while none
		pcancel context.CancelFunc = func() {}
		retry   <-chan time.Time
		backoff = 10 * time.Millisecond
	)
	defer func() { pcancel() }()
	// check reads who comes before st: "" when no one (the lock is ours);
	// errWaiterDeleted-like errors when st's key is gone. It reads now, or,
	// when at is set, at revision at, from the member's own state (no
	// round of agreement among the members: one step fewer between a
	// release and the next holder). That is as good as reading now: at is
	// the revision of a watch event or of a watch's creation, and what it
	// tells stays true (no key created later comes before st; a
	// predecessor seen there is deleted later, after the watch started).
	// A member behind at, or past it by a compaction, fails the read: it is
	// made again, now.
	check := func(at int64) (string, error) {
		read := func(opts ...clientv3.OpOption) (*clientv3.TxnResponse, error) {
			return d.cli.Txn(ctx).Then(
				clientv3.OpGet(st.key, slices.Concat(opts, []clientv3.OpOption{clientv3.WithKeysOnly()})...),
				clientv3.OpGet(st.dir, slices.Concat(opts, clientv3.WithLastCreate(),
					[]clientv3.OpOption{clientv3.WithMaxCreateRev(st.rev - 1), clientv3.WithKeysOnly()})...),
			).Commit()
		}
		var (
			resp *clientv3.TxnResponse
			err  error
		)
		if at > 0 {
			resp, err = read(clientv3.WithRev(at), clientv3.WithSerializable())
		}
		if at <= 0 || err != nil && ctx.Err() == nil {
			at = 0
			resp, err = read()
		}
		if err != nil {
			return "", err
		}
		if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			return "", d.ownDeleted(ctx, s)
		}
		if own == nil {
			// From the revision read at: a deletion after it is seen.
			from := resp.Header.Revision
			if at > 0 {
				from = at
			}
			own = d.cli.Watch(wctx, st.key, clientv3.WithRev(from+1), clientv3.WithFilterPut())
		}
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			return string(kvs[0].Key), nil
		}
		return "", nil
	}
	// next acts on a check: done, same predecessor (keep watching), a new
	// one (watch it), or an error (retry after a pause).
	next := func(at int64) (done bool, err error) {
		p, err := check(at)
		switch {
		case err != nil && (ctx.Err() != nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, errWaiterDeleted)):
			return true, err
		case err != nil:
			pcancel()
			pw = nil
			retry = time.After(backoff)
			backoff = min(2*backoff, time.Second)
			return false, nil
		case p == "":
			return true, nil
		}
		backoff = 10 * time.Millisecond
		if p != pred {
			pcancel()
			pw, pred = nil, p
		}
		return false, nil
	}
	for {
		if pw == nil && retry == nil {
			pctx, c := context.WithCancel(wctx)
			pcancel = c
			pw = d.cli.Watch(pctx, pred, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok := <-own:
			if ok && wr.Err() == nil && len(wr.Events) > 0 {
				return d.ownDeleted(ctx, s)
			}
			if !ok || wr.Err() != nil {
				own = nil // broken: the next check watches again
				if done, err := next(0); done {
					return err
				}
			}
		case wr, ok := <-pw:
			if !ok || wr.Err() != nil {
				pcancel()
				pw = nil
				retry = time.After(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			if wr.Created || len(wr.Events) > 0 {
				// The response's revision: the watch's start when created,
				// the deletion's for an event.
				at := wr.Header.Revision
				for _, ev := range wr.Events {
					at = max(at, ev.Kv.ModRevision)
				}
				if done, err := next(at); done {
					return err
				}
			}
		case <-retry:
			retry = nil
			if done, err := next(0); done {
				return err
			}
		case <-tick.C:
			if err := d.keepWaiting(ctx, s); err != nil {
				return err
			}
		}
	}
}

// keepWaiting keeps the lease alive during a wait, and fails once it may have
// expired.
func (d *etcdDriver) keepWaiting(ctx context.Context, s *session) error {
	kctx, cancel := context.WithTimeout(ctx, max(d.ttl/3, time.Second))
	err := d.refresh(kctx, s, d.ttl/3)
	cancel()
	if err == nil || ctx.Err() != nil {
		return err
	}
	if errors.Is(err, ErrLeaseLost) {
		return err
	}
	d.mu.Lock()
	expired := !time.Now().Before(s.expiry())
	d.mu.Unlock()
	if expired {
		return fmt.Errorf("%w: not renewed for its TTL: %w", ErrLeaseLost, err)
	}
	return nil
}

// ownDeleted says why a waiter's key vanished: its lease ended, or someone
// deleted it.
func (d *etcdDriver) ownDeleted(ctx context.Context, s *session) error {
	cctx, cancel := context.WithTimeout(ctx, max(d.ttl/3, time.Second))
	defer cancel()
	resp, err := d.cli.TimeToLive(cctx, s.id)
	// Either is the store's own answer (an operator revoked the lease or
	// deleted the key): the wait ends, it is not ridden out.
	if err == nil && resp.TTL <= 0 {
		cause := fmt.Errorf("%w (waiter key deleted with it)", ErrLeaseLost)
		d.kill(s, cause)
		return driver.Permanent(cause)
	}
	return driver.Permanent(errWaiterDeleted)
}
