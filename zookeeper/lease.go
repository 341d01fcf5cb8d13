package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// holdState is the life cycle of a hold, changed with compare-and-swap.
type holdState int32

const (
	holdHeld  holdState = iota // granted, renewed by the engine
	holdEnded                  // released, lost or given up
)

// hold is the driver's state of one held lock (Grant.State, Lease.State).
type hold struct {
	path    string // the lock node
	label   string // the owner label, the start of the node's data
	session int64  // the session the node belongs to
	lost    func(error)
	state   atomic.Int32
	done    chan struct{} // closed when the hold ends
	// releasing is set by Release before it deletes the node: the
	// deletion its watch then sees is no loss.
	releasing atomic.Bool
	// follower starts the watch of the node (see follow), and counts in
	// followers until it fired or was stopped; set before h is shared.
	follower  *time.Timer
	followers *sync.WaitGroup
	// granted is the key node's version after the create of a multi-key
	// grant, whose queue then had no other lock node; zero otherwise. Set
	// before the engine sees h, read by its release.
	granted keyVersion
}

// end moves h from held to ended; only the first call reports true.
func (h *hold) end() bool {
	if !h.state.CompareAndSwap(int32(holdHeld), int32(holdEnded)) {
		return false
	}
	close(h.done)
	h.unfollow()
	return true
}

// unfollow stops the watch of h's node before it starts (see follow).
func (h *hold) unfollow() {
	if h.follower != nil && h.follower.Stop() {
		h.followers.Done()
	}
}

func (h *hold) held() bool { return holdState(h.state.Load()) == holdHeld }

// grant records a held lock for renewals and session tracking.
func (d *zkDriver) grant(ctx context.Context, req driver.Request, parent, guid, node string, session, zxid int64, since time.Time) (driver.Grant, error) {
	h := &hold{path: node, label: req.Label, session: session, lost: req.Lost, done: make(chan struct{})}
	d.follow(h)
	d.mu.Lock()
	d.holds[h] = struct{}{}
	d.mu.Unlock()
	// Registered first, checked second: a session change from now on is
	// seen by watchEvents, one before by this check.
	if d.conn.SessionID() != session {
		d.forget(h)
		d.cleanup(ctx, parent, guid, node)
		return driver.Grant{}, fmt.Errorf("session %#x ended while acquiring: %w", session, zk.ErrSessionExpired)
	}
	return driver.Grant{Token: uint64(zxid), Validity: d.validityNow(), Since: since, State: h}, nil
}

// forget drops h from the holds tracked for renewals and session changes.
func (d *zkDriver) forget(h *hold) {
	h.end()
	d.mu.Lock()
	delete(d.holds, h)
	d.mu.Unlock()
}

// RenewBatch implements driver.BatchRenewer: one multi-operation of version
// checks (per 256 KiB of node names) confirms through the leader that each
// node exists, and so that its session was alive after the call began. A
// check that fails with "no node" makes ZooKeeper skip the rest of its
// multi-operation, which is sent again without it.
func (d *zkDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	validity := make([]time.Duration, len(ls))
	errs := make([]error, len(ls))
	holds := make([]*hold, len(ls))
	session := d.conn.SessionID()
	var pending []int
	for i, l := range ls {
		h, err := holdOf(l)
		switch {
		case err != nil:
			errs[i] = err
		case h.session != session:
			errs[i] = fmt.Errorf("%w: session %#x ended", driver.ErrNotHeld, h.session)
		default:
			holds[i] = h
			pending = append(pending, i)
		}
	}
	for len(pending) > 0 {
		chunk, res, err := d.multiChunk(ctx, pending, holds, func(p string) any { return &zk.CheckVersionRequest{Path: p, Version: -1} })
		n := len(chunk)
		if err != nil && len(res) != n {
			// The whole call failed: the outcome of every renewal left is
			// unknown.
			for _, i := range pending {
				errs[i] = fmt.Errorf("renew: %w", err)
			}
			break
		}
		// Checks before the first failure passed; the failed one says why;
		// ZooKeeper skipped the ones after it.
		failed := n
		if err != nil {
			failed = slices.IndexFunc(res, func(r zk.MultiResponse) bool { return r.Error != nil })
			if failed < 0 {
				failed = 0
				res[0].Error = err
			}
		}
		for _, i := range chunk[:failed] {
			validity[i] = d.validityNow()
		}
		var again []int
		if failed < n {
			i, e := chunk[failed], res[failed].Error
			if errors.Is(e, zk.ErrNoNode) || errors.Is(e, zk.ErrBadVersion) {
				errs[i] = fmt.Errorf("%w: %s: %w", driver.ErrNotHeld, holds[i].path, e)
			} else {
				errs[i] = fmt.Errorf("renew %s: %w", holds[i].path, e)
			}
			again = chunk[failed+1:]
		}
		pending = slices.Concat(again, pending[n:])
	}
	for i, h := range holds {
		if h != nil && errors.Is(errs[i], driver.ErrNotHeld) {
			d.forget(h)
		}
	}
	return validity, errs, nil
}

// holdOf returns the hold of l, or the error matching driver.ErrNotHeld
// of a lease that is no held zookeeper lease.
func holdOf(l driver.Lease) (*hold, error) {
	h, ok := l.State.(*hold)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: not a zookeeper lease", driver.ErrNotHeld)
	case !h.held():
		return nil, driver.ErrNotHeld
	}
	return h, nil
}

// multiChunk sends one multi-operation of op on the nodes of the first of
// the holds holds[i], i in pending: at least one, and as many more as
// their names fit in multiBudget. It returns those indexes and the reply.
func (d *zkDriver) multiChunk(ctx context.Context, pending []int, holds []*hold, op func(node string) any) ([]int, []zk.MultiResponse, error) {
	n, size := 0, 0
	for n < len(pending) && (n == 0 || size+len(holds[pending[n]].path)+32 <= multiBudget) {
		size += len(holds[pending[n]].path) + 32
		n++
	}
	chunk := pending[:n]
	ops := make([]any, n)
	for j, i := range chunk {
		ops[j] = op(holds[i].path)
	}
	res, err := call(ctx, d, func() ([]zk.MultiResponse, error) { return d.conn.Multi(ops...) })
	return chunk, res, err
}

// Keep implements driver.Keeper (locker.MinHold): the lock node stays in
// the queue, renewed by nobody, and this Locker deletes it when remaining
// has passed on its monotonic clock; the waiters behind it wake then. If
// the session ends first, ZooKeeper deletes the node with it: after the
// session timeout (at least the TTL, and so the MinHold) when the process
// crashed, but at once when the connection is closed. A Locker's Close
// leaves its kept nodes to the session.
func (d *zkDriver) Keep(_ context.Context, l driver.Lease, remaining time.Duration) error {
	h, err := holdOf(l)
	if err != nil {
		return err
	}
	d.forget(h)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.keeps == nil {
		d.keeps = make(map[*time.Timer]struct{})
	}
	var t *time.Timer
	t = time.AfterFunc(remaining, func() {
		d.mu.Lock()
		_, live := d.keeps[t]
		delete(d.keeps, t)
		d.mu.Unlock()
		if live {
			// On failure the node goes with the session.
			_ = d.conn.Delete(h.path, -1)
		}
	})
	d.keeps[t] = struct{}{}
	return nil
}

// Release implements driver.Driver: it deletes the holder's node (its path
// is unique, so this never touches another owner's node).
func (d *zkDriver) Release(ctx context.Context, l driver.Lease) error {
	h, err := holdOf(l)
	if err != nil {
		return err
	}
	// The hold stays held until the node is gone: ending it first would
	// make a renewal round overlapping the Delete report a loss. Its watch
	// sees the deletion before the Delete's reply comes; a watch not set
	// yet never will be (a slow Delete cost a request more).
	h.releasing.Store(true)
	h.unfollow()
	err = call0(ctx, d, func() error { return d.conn.Delete(h.path, -1) })
	switch {
	case err == nil:
		d.forget(h)
		d.freed(h)
		return nil
	case errors.Is(err, zk.ErrNoNode):
		d.forget(h)
		return fmt.Errorf("%w: %s: %w", driver.ErrNotHeld, h.path, err)
	}
	// Unknown outcome: ZooKeeper does not forget the node while the session
	// lives. The hold stays held, and the engine, which retries the release
	// of a lock whose Unlock had an unknown outcome until it succeeds (and a
	// last time on Close), calls Release again.
	return deleteFailed(h, err)
}
