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
// created just before st's, at revision predRev.
//
// The predecessor's watch has no start revision: etcd then puts it among its
// synced watchers, which get events at once. A watch from a past revision,
// like concurrency.Mutex's, is served by a catch-up loop that runs every
// 100 ms, and on a busy cluster even a watch from the next revision is in the
// past once it reaches the server. So the watch is created first, and a read
// made after its creation checks that the predecessor is still there: its
// deletion then comes after the watch's start, and is seen at once.
func (d *etcdDriver) wait(ctx context.Context, st *lockState, pred string, predRev int64) error {
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
	// read reads our key and, at revision at (0: now), either the last key
	// created before ours or, with predOnly, pred's key. A read at a
	// revision is served by the member from its own state (no round of
	// agreement among the members: one step fewer between a release and the
	// next holder); one behind at, or past it by a compaction, fails it.
	read := func(at int64, predOnly bool) (*clientv3.TxnResponse, error) {
		var opts []clientv3.OpOption
		if at > 0 {
			opts = []clientv3.OpOption{clientv3.WithRev(at), clientv3.WithSerializable()}
		}
		keysOnly := []clientv3.OpOption{clientv3.WithKeysOnly()}
		q := clientv3.OpGet(st.dir, slices.Concat(opts, clientv3.WithLastCreate(),
			[]clientv3.OpOption{clientv3.WithMaxCreateRev(st.rev - 1)}, keysOnly)...)
		if predOnly {
			q = clientv3.OpGet(pred, slices.Concat(opts, keysOnly)...)
		}
		return d.cli.Txn(ctx).Then(clientv3.OpGet(st.key, slices.Concat(opts, keysOnly)...), q).Commit()
	}
	// check reads who comes before st: "" when no one (the lock is ours);
	// errWaiterDeleted-like errors when st's key is gone. at is the revision
	// of a watch event or of a watch's creation (0: none), and check reads
	// there, which is as good as reading now: what it shows stays true (no
	// key created later comes before st; a predecessor there is deleted
	// later, after the watch started). When its read fails, check reads
	// again, now. On a watch's creation (created) it first reads only pred's
	// key: still there with its create revision, pred is still the last key
	// before st (no later key comes before st), and the whole queue is not
	// read.
	check := func(at int64, created bool) (string, int64, error) {
		for {
			resp, err := read(at, created)
			if err != nil && at > 0 && ctx.Err() == nil {
				at = 0
				resp, err = read(at, created)
			}
			if err != nil {
				return "", 0, err
			}
			if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
				return "", 0, d.ownDeleted(ctx, s)
			}
			if own == nil {
				// From the revision read at: a deletion after it is seen.
				from := resp.Header.Revision
				if at > 0 {
					from = at
				}
				own = d.cli.Watch(wctx, st.key, clientv3.WithRev(from+1), clientv3.WithFilterPut())
			}
			kvs := resp.Responses[1].GetResponseRange().Kvs
			if created {
				if len(kvs) > 0 && kvs[0].CreateRevision == predRev {
					return pred, predRev, nil
				}
				created = false // pred went: read the queue
				continue
			}
			if len(kvs) > 0 {
				return string(kvs[0].Key), kvs[0].CreateRevision, nil
			}
			return "", 0, nil
		}
	}
	// next acts on a check: done, same predecessor (keep watching), a new
	// one (watch it), or an error (retry after a pause).
	next := func(at int64, created bool) (done bool, err error) {
		p, rev, err := check(at, created)
		switch {
		case err != nil && (ctx.Err() != nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, errWaiterDeleted)):
			return true, err
		case err != nil:
			pcancel()
			pw = nil
			retry = time.After(driver.Jitter(backoff))
			backoff = min(2*backoff, time.Second)
			return false, nil
		case p == "":
			return true, nil
		}
		backoff = 10 * time.Millisecond
		if p != pred || rev != predRev {
			pcancel()
			pw, pred, predRev = nil, p, rev
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
				if done, err := next(0, false); done {
					return err
				}
			}
		case wr, ok := <-pw:
			if !ok || wr.Err() != nil {
				pcancel()
				pw = nil
				retry = time.After(driver.Jitter(backoff))
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
				if done, err := next(at, wr.Created && len(wr.Events) == 0); done {
					return err
				}
			}
		case <-retry:
			retry = nil
			if done, err := next(0, false); done {
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
