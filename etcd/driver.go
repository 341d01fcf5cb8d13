package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

// errWaiterDeleted is the cause when a waiter's own key vanished while its
// lease still lives (deleted by hand).
var errWaiterDeleted = errors.New("etcd: the waiter's key was deleted")

const (
	// cleanupTimeout bounds the deletion of a waiter key after a failed or
	// cancelled wait, and the lease revocation of Close.
	cleanupTimeout = 5 * time.Second
	// settleTimeout is how long the transaction that queues a waiter may
	// outlive the caller's ctx, so that its outcome is known and the key
	// it created can be deleted for sure.
	settleTimeout = 2 * time.Second
	// batchOps is the number of operations per transaction, below etcd's
	// default limit of 128.
	batchOps = 100
)

// lockState is the driver's state of one acquisition (Grant.State).
//
// Its waiter key is named after the lease, so that a Locker reuses one name
// per lock key (etcd keeps every deleted key until it compacts, and a prefix
// read visits them all: fresh names per acquisition would make every lock
// slower the more often it was taken). Its value holds the acquisition's
// owner token, and every delete compares it: a delete, however late it
// lands, never removes a later acquisition's key of the same name.
type lockState struct {
	key   string // the waiter key
	value string // at creation: owner token, owner label, data (lockValue)
	data  dataWrites
	dir   string
	rev   int64 // create revision: the fencing token
	sess  *session
	lost  func(error)
	ttl   time.Duration // the asked TTL (Request.TTL)
	// own is the lock's own lease while its TTL differs from the
	// Locker's (see ownlease.go), nil while its key is on sess; guarded
	// by etcdDriver.mu.
	own *ownLease
	// validUntil is no earlier than the engine's local deadline for this
	// lock; guarded by etcdDriver.mu.
	validUntil time.Time
	// watched: the watch of the key's directory reports the key's
	// deletion (keywatch.go); guarded by etcdDriver.mu.
	watched bool
	// shared: a shared hold's key, whose leaving may take the limit
	// record with it (limit.go), named by owner (sharename.go).
	shared bool
	owner  string
}

// deleteOp deletes st's key if it is still st's.
func (st *lockState) deleteOp() clientv3.Op {
	return clientv3.OpTxn([]clientv3.Cmp{st.mine()}, []clientv3.Op{clientv3.OpDelete(st.key)}, nil)
}

func deleteIfValue(key, value string) clientv3.Op {
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", value)},
		[]clientv3.Op{clientv3.OpDelete(key)},
		nil,
	)
}

// etcdDriver implements driver.Driver, Acquirer, Configurer and
// BatchRenewer.
type etcdDriver struct {
	cli    *clientv3.Client
	ttl    time.Duration
	ttlSec int64
	seq    atomic.Uint64
	sem    chan struct{} // serialises grants and keep-alives
	// newCtx, when set (NewContext), also bounds Configure's first grant.
	newCtx context.Context
	// dial, when set, bounds Configure's wait for a connection: the first
	// grant then fails with the connection's error.
	dial time.Duration

	mu   sync.Mutex
	sess *session // the live lease, or nil
	// keeps are the timers that delete kept keys when their MinHold ends
	// (Keep); Close stops them and leaves the keys to their leases.
	keeps map[*time.Timer]struct{}
	// watchers counts the goroutines of the key watches (keywatch.go),
	// which Close waits for.
	watchers sync.WaitGroup
	// subs are the Subscribe watches by key directory, with the views of
	// the queued shared requests they keep (sharedview.go).
	subs map[string]map[*dirSub]struct{}
	// closed: CloseContext began; no watch starts any more.
	closed bool
}

func (d *etcdDriver) Info() driver.Info {
	return driver.Info{Name: "etcd", MaxKeyBytes: MaxKeyBytes, PerLockTTL: true}
}

// Configure checks the TTL against the server by granting the first lease.
// It refuses a bad TTL before it talks to the server. With d.dial set, the
// grant fails with the connection's error once no connection came up
// within d.dial.
func (d *etcdDriver) Configure(ctx context.Context, cfg driver.Config) error {
	if cfg.TTL%time.Second != 0 {
		return fmt.Errorf("%w WithTTL: etcd leases count whole seconds; %v is not", locker.ErrInvalidOption, cfg.TTL)
	}
	d.ttl = cfg.TTL
	d.ttlSec = int64(cfg.TTL / time.Second)
	if d.newCtx != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(d.newCtx, cancel)()
	}
	if d.dial > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		awaited := make(chan struct{})
		go func() {
			defer close(awaited)
			if err := awaitConnection(ctx, d.cli, d.dial); err != nil {
				cancel(err)
			}
		}()
		defer func() {
			cancel(nil)
			<-awaited
		}()
	}
	if err := d.acquireSem(ctx); err != nil {
		return d.notConnected(ctx, err)
	}
	defer d.releaseSem()
	s, err := d.grantLocked(ctx)
	if err != nil {
		return d.notConnected(ctx, fmt.Errorf("etcd %s: grant lease: %w", strings.Join(d.cli.Endpoints(), ","), err))
	}
	if s.ttl > d.ttl {
		d.revoke(ctx, s)
		return fmt.Errorf("%w WithTTL: %v is below this etcd server's minimum lease TTL of %v", locker.ErrInvalidOption, d.ttl, s.ttl)
	}
	return nil
}

// newState prepares an acquisition of req.Key on s. Its waiter key is the
// key's directory followed by the lease ID; when suffix is true (that name
// is taken), by the lease ID and a sequence number.
func (d *etcdDriver) newState(s *session, req driver.Request, suffix bool) *lockState {
	dir := Dir(req.Key)
	key := dir + s.hex
	if suffix {
		key += "-" + strconv.FormatUint(d.seq.Add(1), 10)
	}
	return &lockState{key: key, value: lockValue(req.Owner, req.Label, req.Data), dir: dir, sess: s, lost: req.Lost, ttl: req.TTL}
}

// detached returns a context for a write whose outcome must be known: it
// ends settleTimeout after ctx does, or when the returned cancel is called.
// It ends with ctx when the Locker is closing (ctx's cause is
// locker.ErrClosed): the write puts keys on the session's lease, or keeps
// their lease, and Close revokes that lease or lets it expire. A put after
// the revocation fails (etcd has no such lease); one before it goes with
// the lease. The outcome would only serve a deletion, which a closing
// Locker skips (cleanup).
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), locker.ErrClosed) {
			cancel()
			return
		}
		t := time.NewTimer(settleTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-dctx.Done():
		}
	})
	return dctx, func() { stop(); cancel() }
}

// TryAcquire creates the waiter key only when the key's directory is empty:
// one transaction.
func (d *etcdDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.tryAcquire(ctx, req)
	return g, d.classify(err)
}

func (d *etcdDriver) tryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	for attempt := 0; ; attempt++ {
		s, err := d.session(ctx)
		if err != nil {
			return driver.Grant{}, err
		}
		st := d.newState(s, req, false)
		tctx, cancel := detached(ctx)
		resp, err := d.cli.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(st.dir), "=", 0).WithPrefix()).
			Then(clientv3.OpPut(st.key, st.value, clientv3.WithLease(s.id))).
			Commit()
		cancel()
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
				d.kill(s, fmt.Errorf("%w: %w", ErrLeaseLost, err))
				continue
			}
			return driver.Grant{}, d.cleanup(ctx, st, false, err)
		}
		if !resp.Succeeded {
			return driver.Grant{}, driver.Held(0)
		}
		st.rev = resp.Header.Revision
		return d.grant(ctx, st)
	}
}

// Acquire queues a waiter key and waits for its turn. The uncontended path
// is one transaction, which creates the key and reads its predecessor.
func (d *etcdDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.acquire(ctx, req)
	return g, d.classify(err)
}

func (d *etcdDriver) acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	suffix := false
	for attempt := 0; ; {
		s, err := d.session(ctx)
		if err != nil {
			return driver.Grant{}, err
		}
		st := d.newState(s, req, suffix)
		// The predecessor is read before our key exists: the last waiter.
		// Keys only: etcd 3.7 then answers from its in-memory index, where
		// a full read fetches every waiter's key-value from its backend to
		// sort them, a cost that grew with the queue.
		tctx, cancel := detached(ctx)
		resp, err := d.cli.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(st.key), "=", 0)).
			Then(
				clientv3.OpGet(st.dir, append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())...),
				clientv3.OpPut(st.key, st.value, clientv3.WithLease(s.id)),
			).
			Else(clientv3.OpGet(st.key)).
			Commit()
		cancel()
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
				attempt++
				d.kill(s, fmt.Errorf("%w: %w", ErrLeaseLost, err))
				continue
			}
			return driver.Grant{}, d.cleanup(ctx, st, false, err)
		}
		if !resp.Succeeded {
			// The name is taken by a key of ours that nothing tracks any
			// more: delete it at the next keep-alive, and queue under
			// another name.
			for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
				if !strings.HasPrefix(string(kv.Value), keptPrefix) {
					d.orphan(&lockState{key: st.key, value: string(kv.Value), sess: s})
				}
			}
			suffix = true
			continue
		}
		st.rev = resp.Header.Revision
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, d.cleanup(ctx, st, true, err)
		}
		queued := false
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			queued = true
			if err := d.wait(ctx, st, string(kvs[0].Key), kvs[0].CreateRevision); err != nil {
				return driver.Grant{}, d.cleanup(ctx, st, true, err)
			}
		}
		g, err := d.grant(ctx, st)
		g.Queued = queued
		return g, err
	}
}

// grant registers a lock whose key is first in its directory. Its validity
// runs from the lease's last keep-alive. A lock whose TTL is not the
// Locker's first moves onto a lease of its own.
func (d *etcdDriver) grant(ctx context.Context, st *lockState) (driver.Grant, error) {
	s := st.sess
	if st.ttl != d.ttl {
		o, err := d.moveToOwnLease(ctx, st, st.ttl)
		if err != nil {
			return driver.Grant{}, d.cleanup(ctx, st, true, err)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		st.validUntil = o.expiry()
		if s.dead == nil {
			s.track(st)
		}
		return driver.Grant{Token: uint64(st.rev), Validity: o.ttl, Since: o.sent, State: st}, nil
	}
	// A lease renewed long ago would leave the engine little time: renew it
	// first.
	if err := d.refresh(ctx, s, d.ttl/2); err != nil {
		return driver.Grant{}, d.cleanup(ctx, st, true, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.dead != nil {
		return driver.Grant{}, s.dead
	}
	st.validUntil = s.expiry()
	s.track(st)
	return driver.Grant{Token: uint64(st.rev), Validity: s.ttl, Since: s.sent, State: st}, nil
}

// cleanup deletes the waiter key of a failed or cancelled acquisition with a
// fresh bounded context, and returns cause. When the deletion fails, cause
// comes wrapped in a driver.Residue: the engine retries the deletion in the
// background until etcd answers. When the transaction that would have
// created the key had an unknown outcome (created is false: it may still
// land), the key is also deleted before the lease is next kept alive.
func (d *etcdDriver) cleanup(ctx context.Context, st *lockState, created bool, cause error) error {
	d.mu.Lock()
	onSession := st.own == nil
	dead := st.sess.dead != nil && onSession
	// A Locker that is closing revokes its session's lease next, or lets
	// it expire: a key on it goes too, and a deletion first, against a
	// store that may not answer, would only hold Close up.
	closing := onSession && (st.sess == d.sess || d.closed) && errors.Is(context.Cause(ctx), locker.ErrClosed)
	d.mu.Unlock()
	if dead || closing {
		return cause // etcd deletes, or deleted, the key with the lease
	}
	if !created {
		d.orphan(st)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	del := func(ctx context.Context) error {
		_, err := d.cli.Txn(ctx).Then(st.leaveOps()...).Commit()
		if err == nil {
			d.freeShareName(st)
		}
		return d.classify(err)
	}
	if err := del(cctx); err != nil {
		return &driver.Residue{Err: cause, Cleanup: del}
	}
	return cause
}

// RenewBatch keeps the lease alive (one KeepAliveOnce, skipped when another
// call did it within the last TTL/6) and reads no key: the watch of each
// lock's key directory reports a deleted key (keywatch.go). A lock no watch
// vouches for yet is read once, its whole directory in one range read,
// batchOps directories a transaction.
func (d *etcdDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	start := time.Now()
	validity := make([]time.Duration, len(ls))
	errs := make([]error, len(ls))
	states := make([]*lockState, len(ls))
	var live *session
	var own []int // the locks with a TTL of their own
	d.mu.Lock()
	for i, l := range ls {
		st := l.State.(*lockState)
		if dead := st.sess.dead; dead != nil {
			errs[i] = fmt.Errorf("%w: %w", driver.ErrNotHeld, dead)
			continue
		}
		// The Locker's lease is kept alive for the locks on their own
		// leases too: they move back onto it.
		live = st.sess
		if st.own != nil || l.TTL != d.ttl {
			own = append(own, i)
			continue
		}
		states[i] = st
	}
	d.mu.Unlock()
	if live == nil {
		return validity, errs, nil
	}
	if err := d.refresh(ctx, live, d.ttl/6); err != nil {
		if !errors.Is(err, ErrLeaseLost) {
			return nil, nil, err
		}
		for i := range ls {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
			}
		}
		return validity, errs, nil
	}
	for _, i := range own {
		st := ls[i].State.(*lockState)
		validity[i], errs[i] = d.renewOwn(ctx, st, ls[i].TTL, start)
	}
	// renewed extends st's validity to until; the caller holds mu.
	renewed := func(i int, st *lockState, until time.Time) {
		validity[i] = until.Sub(start)
		if until.After(st.validUntil) {
			st.validUntil = until
		}
	}
	var unsure []int
	d.mu.Lock()
	until := live.expiry()
	for i, st := range states {
		switch {
		case st == nil:
		case !st.tracked():
			// Deleted (its watch reported it lost), or past its
			// deadline.
			errs[i] = errReplaced(st)
		case d.vouch(st):
			renewed(i, st, until)
		default:
			unsure = append(unsure, i)
		}
	}
	d.mu.Unlock()
	for len(unsure) > 0 {
		sts := make([]*lockState, 0, len(unsure))
		for _, i := range unsure {
			sts = append(sts, states[i])
		}
		dirs := dirsOf(sts)
		if len(dirs) > batchOps {
			dirs = dirs[:batchOps]
		}
		ops := make([]clientv3.Op, len(dirs))
		for j, dir := range dirs {
			ops[j] = clientv3.OpGet(dir+live.hex, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		}
		resp, err := d.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, nil, err
		}
		created := map[string]int64{}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().Kvs {
				created[string(kv.Key)] = kv.CreateRevision
			}
		}
		read := map[string]bool{}
		for _, dir := range dirs {
			read[dir] = true
		}
		d.mu.Lock()
		unsure = slices.DeleteFunc(unsure, func(i int) bool {
			st := states[i]
			switch {
			case !read[st.dir]:
				return false
			case !st.tracked():
				errs[i] = errReplaced(st)
			case created[st.key] != st.rev:
				st.sess.untrack(st)
				errs[i] = errReplaced(st)
			default:
				d.confirmed(st, resp.Header.Revision)
				renewed(i, st, until)
			}
			return true
		})
		d.mu.Unlock()
	}
	return validity, errs, nil
}

// tracked reports whether st is among its session's locks. The caller
// holds mu.
func (st *lockState) tracked() bool {
	_, ok := st.sess.locks[st]
	return ok
}

// forget stops tracking st (a lock past its deadline is no longer tracked:
// its key is among the orphans).
func (d *etcdDriver) forget(st *lockState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st.sess.untrack(st)
}

// Release deletes the lock's key if it is still the lock's: a
// compare-and-delete on the lock's own value, safe to repeat. A release of
// unknown outcome is repeated by the engine until etcd answers (and a last
// time on Close, before the lease is revoked); a lock that passed its
// deadline is deleted before the lease is next kept alive, and again here.
func (d *etcdDriver) Release(ctx context.Context, l driver.Lease) error {
	st := l.State.(*lockState)
	d.forget(st)
	d.mu.Lock()
	dead, own := st.sess.dead, st.own
	d.mu.Unlock()
	if dead != nil && own == nil {
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, dead) // the key went with the lease
	}
	resp, err := d.cli.Txn(ctx).Then(st.leaveOps()...).Commit()
	if err != nil {
		return d.classify(err)
	}
	d.freeShareName(st)
	if own != nil {
		d.revokeLease(ctx, own.id)
	}
	if !resp.Responses[0].GetResponseTxn().Succeeded {
		return fmt.Errorf("%w: key %q deleted or replaced", driver.ErrNotHeld, st.key)
	}
	return nil
}

// keptPrefix starts the value of a key a Keep moved onto a lease of its own.
const keptPrefix = "kept "

// Keep implements driver.Keeper (locker.MinHold): the lock's key moves onto
// a lease of its own that nobody keeps alive, and its value is marked, so
// that nothing of this Locker takes it for one of its own orphans. The key
// keeps its create revision: the waiters queued behind it wait until it is
// deleted. etcd has no clock to ask and its leases count whole seconds
// (rounded up, and to the server's minimum lease TTL): this Locker deletes
// the key itself when remaining has passed on its monotonic clock, and the
// lease deletes it later if this process does not live that long (or its
// Locker is closed first). The remaining time counts from the call.
func (d *etcdDriver) Keep(ctx context.Context, l driver.Lease, remaining time.Duration) error {
	// The claim ends remaining after this call, not after its round trips.
	end := time.Now().Add(remaining)
	st := l.State.(*lockState)
	d.forget(st)
	d.mu.Lock()
	dead, own := st.sess.dead, st.own
	d.mu.Unlock()
	if dead != nil && own == nil {
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, dead)
	}
	lease, err := d.cli.Grant(ctx, leaseSeconds(remaining))
	if err != nil {
		return d.classify(err)
	}
	value, _ := st.now()
	resp, err := d.cli.Txn(ctx).
		If(st.mine()).
		Then(clientv3.OpPut(st.key, keptPrefix+value, clientv3.WithLease(lease.ID))).
		Commit()
	if err == nil && resp.Succeeded {
		// The kept key keeps its name: a request that gets it finds
		// it taken, and takes another.
		d.freeShareName(st)
		d.deleteAfter(st.key, keptPrefix+value, time.Until(end), st.limitOps()...)
		if own != nil {
			d.revokeLease(ctx, own.id)
		}
		return nil
	}
	// Not moved: the lease would only wait for its expiry.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	_, _ = d.cli.Revoke(rctx, lease.ID)
	cancel()
	if err != nil {
		return d.classify(err)
	}
	return fmt.Errorf("%w: key %q deleted or replaced", driver.ErrNotHeld, st.key)
}

// deleteAfter deletes key, if its value is still value, after d, in a
// transaction that also runs ops.
func (d *etcdDriver) deleteAfter(key, value string, after time.Duration, ops ...clientv3.Op) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.keeps == nil {
		d.keeps = make(map[*time.Timer]struct{})
	}
	var t *time.Timer
	t = time.AfterFunc(after, func() {
		d.mu.Lock()
		_, live := d.keeps[t]
		delete(d.keeps, t)
		d.mu.Unlock()
		if !live {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		defer cancel()
		// On failure the key's lease deletes it, a little later.
		_, _ = d.cli.Txn(ctx).Then(append([]clientv3.Op{deleteIfValue(key, value)}, ops...)...).Commit()
	})
	d.keeps[t] = struct{}{}
}

// Close revokes the lease, which deletes every key left on it.
func (d *etcdDriver) Close() error { return d.CloseContext(context.Background()) }

// CloseContext implements driver.ContextCloser: it revokes the Locker's
// lease, giving up when ctx ends.
func (d *etcdDriver) CloseContext(ctx context.Context) error {
	d.mu.Lock()
	s := d.sess
	d.sess = nil
	for t := range d.keeps {
		t.Stop()
	}
	d.keeps = nil
	d.closed = true
	for _, subs := range d.subs {
		for sub := range subs {
			sub.live = false
			if sub.idle != nil {
				sub.idle.Stop()
			}
			sub.stop()
		}
	}
	d.mu.Unlock()
	if s != nil {
		d.revoke(ctx, s)
	}
	d.watchers.Wait() // every watch was stopped with its session
	return nil
}

// classify marks the etcd errors no retry can cure: a closed client, and
// authentication and permission refusals.
func (d *etcdDriver) classify(err error) error {
	switch {
	case err == nil:
		return nil
	case d.cli.Ctx().Err() != nil:
		return driver.Permanent(fmt.Errorf("etcd client closed: %w", err))
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrAuthFailed),
		errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrAuthNotEnabled):
		return driver.Permanent(err)
	}
	return err
}
