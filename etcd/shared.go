package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/driver"
)

// sharedPrefix starts the value of a shared hold's key, which is followed
// by the mode, the weight, the limit, the owner token and the label.
const sharedPrefix = "shared "

// shareRecord is a shared hold's key as read from the store.
type shareRecord struct {
	mode   driver.Mode
	weight int
	limit  int
	label  string
}

// sharedValue is the value of the key of req's shared hold.
func sharedValue(req driver.Request, s driver.Share) string {
	return fmt.Sprintf("%s%d %d %d %s %s", sharedPrefix, s.Mode, s.Weight, s.Limit, req.Owner, req.Label)
}

// parseShared reads a key's value; ok is false for a plain lock's key.
func parseShared(value []byte) (r shareRecord, ok bool) {
	v, found := strings.CutPrefix(strings.TrimPrefix(string(value), keptPrefix), sharedPrefix)
	if !found {
		return r, false
	}
	f := strings.SplitN(v, " ", 5)
	if len(f) < 4 {
		return r, false
	}
	mode, err1 := strconv.Atoi(f[0])
	weight, err2 := strconv.Atoi(f[1])
	limit, err3 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2, err3); err != nil || weight < 1 {
		return r, false
	}
	r = shareRecord{mode: driver.Mode(mode), weight: weight, limit: limit}
	if len(f) == 5 {
		r.label = f[4]
	}
	return r, true
}

// kind names the use of a key, for conflict errors.
func (r shareRecord) kind() string {
	if r.mode == driver.Permits {
		return fmt.Sprintf("a semaphore of %d permits", r.limit)
	}
	return "a read-write lock"
}

func shareKind(s driver.Share) string {
	return shareRecord{mode: s.Mode, limit: s.Limit}.kind()
}

// conflict returns the ErrConflict of a request of s behind the keys
// ahead of it (in create revision order), under the limit record lr, or
// nil when s may join them. The record's limit rules a semaphore's keys;
// without one, the first key's does.
func conflict(ahead []*mvccpb.KeyValue, lr limitRecord, s driver.Share) error {
	if len(ahead) == 0 {
		if s.Mode == driver.Permits && lr.limit > 0 && lr.limit != s.Limit {
			return fmt.Errorf("%w: the key is a semaphore of %d permits, not %d", driver.ErrConflict, lr.limit, s.Limit)
		}
		return nil
	}
	r, ok := parseShared(ahead[0].Value)
	switch {
	case !ok:
		return fmt.Errorf("%w: the key is a plain lock, not %s", driver.ErrConflict, shareKind(s))
	case (r.mode == driver.Permits) != (s.Mode == driver.Permits):
		return fmt.Errorf("%w: the key is %s, not %s", driver.ErrConflict, r.kind(), shareKind(s))
	case s.Mode == driver.Permits && lr.ruling(r) != s.Limit:
		return fmt.Errorf("%w: the key is a semaphore of %d permits, not %d", driver.ErrConflict, lr.ruling(r), s.Limit)
	}
	return nil
}

// fits reports whether a hold of s may be held behind the keys ahead of
// it (holders and waiters, in create revision order): a writer must be
// first, a reader needs no writer ahead, permits need the weights ahead
// and their own to fit the limit. A plain lock's key blocks everything.
func fits(ahead []*mvccpb.KeyValue, s driver.Share) bool {
	used := s.Weight
	for _, kv := range ahead {
		r, ok := parseShared(kv.Value)
		if !ok || s.Mode == driver.Write || r.mode != s.Mode {
			return false
		}
		used += r.weight
	}
	return s.Mode != driver.Permits || used <= s.Limit
}

// TryAcquireShared implements driver.Sharer. Each holder or waiter is a
// key of the key's directory on the Locker's lease, named after the lease
// and a slot that the request keeps (sharename.go), so that a waiter's
// later attempts find the key its first one created. One transaction
// creates the key, or finds it, and reads the directory and the limit
// record (limit.go); the request holds once the keys ahead of it fit (see
// fits). A request that does not fit
// keeps its key when it queues, and deletes it when it does not.
//
// A grant's token is the revision of a write that made it: the key's
// creation, or for a waiter a rewrite of its key. A key's create revision
// would not do: a waiter that fits is granted at its next attempt, after
// a later arrival may have been granted behind it. That rewrite compares
// the limit record as the waiter last read it: a waiter is never granted
// under a limit SetLimit changed meanwhile.
func (d *etcdDriver) TryAcquireShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
	g, err := d.tryAcquireShared(ctx, req, s)
	return g, d.classify(err)
}

func (d *etcdDriver) tryAcquireShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
	for attempt := 0; ; attempt++ {
		sess, err := d.session(ctx)
		if err != nil {
			return driver.Grant{}, err
		}
		st := d.newState(sess, req, false)
		st.key = d.shareName(sess, st.dir, req.Owner)
		st.value = sharedValue(req, s)
		st.shared, st.owner = true, req.Owner
		if v := d.view(st.dir, st.key, st.value); v != nil {
			// Queued, and watched since its last read: no read.
			st.rev = v.rev
			if err := ctx.Err(); err != nil {
				return driver.Grant{}, d.cleanup(ctx, st, true, err)
			}
			if !d.viewFits(v, s) {
				return driver.Grant{}, d.refuseShared(ctx, st, s)
			}
			d.dropView(st.dir, st.key)
			token, err := d.claimShared(ctx, st, v.limit)
			if errors.Is(err, errLimitChanged) {
				continue
			}
			if err != nil {
				return driver.Grant{}, err
			}
			g, err := d.grant(ctx, st)
			if err == nil {
				g.Token, g.Queued = uint64(token), true
			}
			return g, err
		}
		sent := time.Now()
		list := clientv3.OpGet(st.dir, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		getLimit := clientv3.OpGet(limitKeyOf(st.dir))
		tctx, cancel := detached(ctx)
		resp, err := d.cli.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(st.key), "=", 0)).
			Then(list, getLimit, dropStaleLimitOp(st.dir), clientv3.OpPut(st.key, st.value, clientv3.WithLease(sess.id))).
			Else(list, getLimit).
			Commit()
		cancel()
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
				d.kill(sess, fmt.Errorf("%w: %w", ErrLeaseLost, err))
				continue
			}
			return driver.Grant{}, d.cleanup(ctx, st, false, err)
		}
		fresh := resp.Succeeded
		if fresh {
			d.createdShare(st)
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		lr := limitOf(resp.Responses[1].GetResponseRange())
		st.rev = resp.Header.Revision
		if fresh && len(kvs) == 0 {
			// The directory was empty: a record there was left behind,
			// and the transaction deleted it.
			lr = limitRecord{}
		}
		if !fresh {
			// Queued by an earlier attempt: the keys ahead are those
			// created before ours.
			i := 0
			for i < len(kvs) && string(kvs[i].Key) != st.key {
				i++
			}
			if i < len(kvs) && d.takenShare(st) {
				// The slot's name is another key's: take another name.
				if !strings.HasPrefix(string(kvs[i].Value), keptPrefix) {
					d.orphan(&lockState{key: st.key, value: string(kvs[i].Value), sess: sess})
				}
				d.renameShare(st)
				continue
			}
			if i == len(kvs) || string(kvs[i].Value) != st.value {
				return driver.Grant{}, fmt.Errorf("etcd: key %q of a queued shared hold changed", st.key)
			}
			st.rev = kvs[i].CreateRevision
			kvs = kvs[:i]
		}
		if err := conflict(kvs, lr, s); err != nil {
			return driver.Grant{}, d.cleanup(ctx, st, true, err)
		}
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, d.cleanup(ctx, st, true, err)
		}
		if !fits(kvs, s) {
			if s.Queue {
				d.keepView(st.dir, st.key, st.value, sent, st.rev, resp.Header.Revision, kvs, lr)
			}
			return driver.Grant{}, d.refuseShared(ctx, st, s)
		}
		d.dropView(st.dir, st.key)
		token := st.rev
		if !fresh {
			token, err = d.claimShared(ctx, st, lr)
			if errors.Is(err, errLimitChanged) {
				continue
			}
			if err != nil {
				return driver.Grant{}, err
			}
		}
		g, err := d.grant(ctx, st)
		if err == nil {
			g.Token, g.Queued = uint64(token), !fresh
		}
		return g, err
	}
}

// errLimitChanged is claimShared's answer when the limit record changed
// since the waiter read it: it reads again.
var errLimitChanged = errors.New("etcd: the semaphore's limit changed")

// claimShared rewrites the key of a waiter that fits under the limit
// record lr, and returns the revision of that write: the grant's token.
// It returns errLimitChanged, and writes nothing, when the record is no
// longer lr.
func (d *etcdDriver) claimShared(ctx context.Context, st *lockState, lr limitRecord) (int64, error) {
	tctx, cancel := detached(ctx)
	resp, err := d.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(st.key), "=", st.rev), lr.unchanged(st.dir)).
		Then(clientv3.OpPut(st.key, st.value, clientv3.WithIgnoreLease())).
		Else(clientv3.OpGet(st.key, clientv3.WithKeysOnly())).
		Commit()
	cancel()
	if err != nil {
		return 0, d.cleanup(ctx, st, true, err)
	}
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && kvs[0].CreateRevision == st.rev {
			return 0, errLimitChanged
		}
		d.freeShareName(st)
		return 0, fmt.Errorf("etcd: key %q of a queued shared hold deleted", st.key)
	}
	return resp.Header.Revision, nil
}

// refuseShared is the refusal of a hold that does not fit: a Residue that
// deletes its key when it queues, the deletion of its key otherwise.
func (d *etcdDriver) refuseShared(ctx context.Context, st *lockState, s driver.Share) error {
	if !s.Queue {
		return d.cleanup(ctx, st, true, driver.Held(0))
	}
	// Back before the lease, which the attempts keep alive, expires.
	return &driver.Residue{Err: driver.Held(min(st.ttl, d.ttl) / 3), Cleanup: func(ctx context.Context) error {
		_, err := d.cli.Txn(ctx).Then(st.leaveOps()...).Commit()
		if err == nil {
			d.freeShareName(st)
		}
		return d.classify(err)
	}}
}

// sharedHolders returns the keys of the directory kvs (in create revision
// order) that hold the key: those that fit behind the keys ahead of them
// under the limit they were granted with, their own. A limit that SetLimit
// lowered does not take a holder's permits.
func sharedHolders(kvs []*mvccpb.KeyValue) []*mvccpb.KeyValue {
	var held []*mvccpb.KeyValue
	for i, kv := range kvs {
		r, ok := parseShared(kv.Value)
		if !ok || !fits(kvs[:i], driver.Share{Mode: r.mode, Weight: r.weight, Limit: r.limit}) {
			break
		}
		held = append(held, kv)
	}
	return held
}

// readShared returns every key of key's directory, in create revision
// order, and its limit record, as one read sees them.
func (d *etcdDriver) readShared(ctx context.Context, key string) ([]*mvccpb.KeyValue, limitRecord, error) {
	resp, err := d.cli.Txn(ctx).Then(
		clientv3.OpGet(Dir(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(LimitKey(key)),
	).Commit()
	if err != nil {
		return nil, limitRecord{}, d.classify(err)
	}
	return resp.Responses[0].GetResponseRange().Kvs, limitOf(resp.Responses[1].GetResponseRange()), nil
}

// inspectShared is Inspect of a key held by shared holds. The token of a
// holder is its key's last write (a kept hold's key was written again by
// Keep). A semaphore's limit is its limit record's, when it has one.
func (d *etcdDriver) inspectShared(ctx context.Context, key string) (driver.Status, error) {
	kvs, lr, err := d.readShared(ctx, key)
	if err != nil || len(kvs) == 0 {
		return driver.Status{}, err
	}
	first, _ := parseShared(kvs[0].Value)
	held := sharedHolders(kvs)
	st := sharedStatusOf(first, kvs[0], len(kvs))
	if first.mode == driver.Permits {
		st.Limit = lr.ruling(first)
	}
	st.Held, st.Label, st.Token, st.Waiters = len(held) > 0, "", 0, len(kvs)-len(held)
	for _, kv := range held {
		r, _ := parseShared(kv.Value)
		h := driver.Holder{Mode: r.mode, Weight: r.weight, Label: r.label, Token: uint64(kv.ModRevision)}
		if kv.Lease != 0 {
			h.Expires = d.leaseExpiry(ctx, clientv3.LeaseID(kv.Lease))
		}
		st.Holders = append(st.Holders, h)
		if h.Token >= st.Token {
			st.Label, st.Token, st.Expires = h.Label, h.Token, h.Expires
		}
	}
	return st, nil
}

// sharedStatusOf is the Status of a key held by shared holds as far as its
// first key, r read from kv, tells: its holder, and n keys in all. Inspect
// completes it with every holder.
func sharedStatusOf(r shareRecord, kv *mvccpb.KeyValue, n int) driver.Status {
	st := driver.Status{Held: true, Label: r.label, Token: uint64(kv.ModRevision), Waiters: n - 1}
	if r.mode == driver.Permits {
		st.Limit = r.limit
	}
	return st
}

// breakShared deletes every holder of a shared key, batchOps holders a
// transaction, each transaction only while all of its holders are
// unchanged. A transaction with a holder that changed meanwhile deletes
// nothing, and the error says so.
func (d *etcdDriver) breakShared(ctx context.Context, kvs []*mvccpb.KeyValue) error {
	holders := sharedHolders(kvs)
	if len(holders) == 0 {
		return driver.ErrNotHeld
	}
	changed := false
	for chunk := range slices.Chunk(holders, batchOps) {
		cmps := make([]clientv3.Cmp, len(chunk))
		ops := make([]clientv3.Op, len(chunk))
		for i, kv := range chunk {
			cmps[i] = clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)
			ops[i] = clientv3.OpDelete(string(kv.Key))
		}
		resp, err := d.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return d.classify(err)
		}
		changed = changed || !resp.Succeeded
	}
	if changed {
		return errors.New("etcd: some holders' keys changed while they were being deleted; try again")
	}
	return nil
}
