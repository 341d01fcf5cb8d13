package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// multiOps is how many operations each key adds to the multi-operation of
// TryAcquireMulti: a check of its node's data version, then createOps.
const multiOps = 3

// multiKey is one key of a multi-key attempt, as its listing showed it.
type multiKey struct {
	parent   string
	guid     string
	data     []byte
	children []string
	version  int32 // the data version of parent
	czxid    int64 // the zxid of parent's creation
	missing  bool  // parent did not exist
}

// TryAcquireMulti implements driver.MultiAcquirer. It lists every key's
// queue, with its node's stat, in parallel. When a queue has a lock node,
// it answers ErrHeld (ErrConflict when the first is a shared hold's)
// having written nothing. Otherwise one multi-operation adds a lock node
// to every queue (createOps), each behind a check of its key's node's data
// version. Every lock node comes with a write of that node, so the check
// fails when a lock node joined the queue since the listing: the
// multi-operation then takes nothing, and the keys are listed once more. A
// missing key node is created (an empty container) before the
// multi-operation. Each key's token is the zxid of the multi-operation, as
// for TryAcquire. Limit records and foreign children hold up no key, as
// for a waiting Lock. Keys this Locker's own multi-key take held last, and
// released, are not listed (see freed). Keys whose names do not fit in
// 256 KiB answer driver.ErrNotAtomic.
func (d *zkDriver) TryAcquireMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	gs, _, err := d.tryMulti(ctx, reqs)
	return gs, classify(err)
}

// tryMulti is one attempt of TryAcquireMulti. When a key is held, it also
// returns the last lock node of each held key's queue: the nodes a wait
// watches.
func (d *zkDriver) tryMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, []string, error) {
	keys := make([]multiKey, len(reqs))
	size := 0
	for i, req := range reqs {
		keys[i] = multiKey{parent: d.parentOf(req.Key), guid: newGUID(), data: nodeData(req.Label, req.Data)}
		size += 4*len(keys[i].parent) + len(keys[i].data) + 128
	}
	if size > multiBudget {
		return nil, nil, fmt.Errorf("%w: %d keys take %d bytes, more than one multi-operation's %d", driver.ErrNotAtomic, len(keys), size, multiBudget)
	}
	reread := false
	recalled := d.recall(keys)
	for attempt := 0; ; attempt++ {
		if !recalled {
			if blockers, err := d.listFree(ctx, keys); err != nil {
				return nil, blockers, err
			}
		}
		if d.hooks.beforeMulti != nil {
			d.hooks.beforeMulti()
		}
		acl := d.currentACL()
		ops := make([]any, 0, multiOps*len(keys))
		cs := make([]pendingCreate, len(keys))
		for i, k := range keys {
			ops = append(ops, &zk.CheckVersionRequest{Path: k.parent, Version: k.version})
			cs[i] = pendingCreate{parent: k.parent, guid: k.guid, at: len(ops)}
			ops = append(ops, createOps(k.parent, k.guid, k.data, acl)...)
		}
		session := d.conn.SessionID()
		sent := time.Now()
		ch := start(d, func() ([]zk.MultiResponse, error) { return d.conn.Multi(ops...) })
		var r result[[]zk.MultiResponse]
		select {
		case r = <-ch:
		case <-ctx.Done():
			d.abandonCreate(ctx, ch, cs...)
			return nil, nil, ctx.Err()
		}
		if r.err == nil {
			gs, err := d.grantMulti(ctx, reqs, keys, cs, r, session, sent)
			return gs, nil, err
		}
		op := failedOp(r)
		k := keys[op/multiOps]
		switch {
		case d.fallBack(acl, r.err):
			continue
		case recalled && (errors.Is(r.err, zk.ErrBadVersion) || errors.Is(r.err, zk.ErrNoNode)):
			recalled = false // a key changed since this Locker freed it: list
			d.contend(keys)
			continue
		case errors.Is(r.err, zk.ErrBadVersion) && !reread:
			reread = true // a lock node joined a queue: look again, once
			continue
		case errors.Is(r.err, zk.ErrBadVersion):
			return nil, nil, fmt.Errorf("%s: %w", k.parent, driver.Held(0))
		case errors.Is(r.err, zk.ErrNoNode) && attempt < maxParentAttempts:
			continue // a key's node was deleted since the listing
		case mayHaveApplied(r.err):
			d.undoMulti(ctx, cs, nil)
		}
		perm := [multiOps]string{"READ", "CREATE", "WRITE"}[op%multiOps]
		return nil, nil, fmt.Errorf("create lock nodes under %d keys: %w", len(keys), denied(r.err, k.parent, perm))
	}
}

// listFree lists the queues of keys and records what it saw there. It
// returns the error of an attempt on keys when a key is held (see
// blocked), and otherwise deletes the queues' limit records and creates
// the missing key nodes.
func (d *zkDriver) listFree(ctx context.Context, keys []multiKey) ([]string, error) {
	if err := d.listKeys(ctx, keys); err != nil {
		return nil, err
	}
	if blockers, err := blocked(keys); err != nil {
		return blockers, err
	}
	for _, k := range keys {
		// No lock node is older than these: they rule nothing.
		d.clearRecords(k.parent, recordsOf(k.children))
	}
	return nil, d.ensureKeys(ctx, keys)
}

// failedOp returns the index of the operation that failed a
// multi-operation, 0 when the reply does not say.
func failedOp(r result[[]zk.MultiResponse]) int {
	for i, res := range r.v {
		if res.Error != nil {
			return i
		}
	}
	return 0
}

// listKeys lists the queue of every key, in parallel, and records what it
// saw in keys.
func (d *zkDriver) listKeys(ctx context.Context, keys []multiKey) error {
	type listing struct {
		children []string
		stat     *zk.Stat
	}
	chs := make([]<-chan result[listing], len(keys))
	for i, k := range keys {
		chs[i] = start(d, func() (listing, error) {
			c, st, err := d.children(ctx, k.parent)
			return listing{c, st}, err
		})
	}
	for i, ch := range chs {
		var r result[listing]
		select {
		case r = <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		k := &keys[i]
		switch {
		case errors.Is(r.err, zk.ErrNoNode):
			k.children, k.version, k.czxid, k.missing = nil, 0, 0, true
		case r.err != nil:
			return r.err
		default:
			k.children, k.version, k.czxid, k.missing = r.v.children, r.v.stat.Version, r.v.stat.Czxid, false
		}
	}
	return nil
}

// blocked returns the error of an attempt on keys as listed, nil when no
// queue has a lock node, and with ErrHeld the last lock node of each held
// key's queue.
func blocked(keys []multiKey) ([]string, error) {
	var last []string
	var held error
	for _, k := range keys {
		q := queueOf(k.children)
		if len(q) == 0 {
			continue
		}
		if !q[0].plain {
			return nil, fmt.Errorf("%s: %w: the key is %s, not a plain lock", k.parent, driver.ErrConflict, kind(q[0].mode, keyLimit(q, recordsOf(k.children))))
		}
		last = append(last, k.parent+"/"+q[len(q)-1].name)
		held = cmp.Or(held, fmt.Errorf("%s: %w", k.parent, driver.Held(0)))
	}
	return last, held
}

// ensureKeys creates the missing key nodes of keys, in parallel. A key
// node that nobody wrote has data version 0, the version the listing
// recorded for it.
func (d *zkDriver) ensureKeys(ctx context.Context, keys []multiKey) error {
	var chs []<-chan result[struct{}]
	for _, k := range keys {
		if k.missing {
			chs = append(chs, start(d, func() (struct{}, error) { return struct{}{}, d.ensureParent(ctx, k.parent) }))
		}
	}
	var first error
	for _, ch := range chs {
		select {
		case r := <-ch:
			first = cmp.Or(first, r.err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

// grantMulti turns the reply r of a successful multi-operation, sent at
// sent in session, into the grants of reqs, whose keys are keys and whose
// creates are cs. On failure it deletes every node r created.
//
// A key node listed with data version v may have been deleted (empty) and
// made again since, and have reached v again with lock nodes of others:
// the check of v then passes. The node's czxid in the reply tells; the
// attempt then gives back what it took, and answers ErrHeld. (A key node
// that was missing has version 0 until a lock node joins it.)
func (d *zkDriver) grantMulti(ctx context.Context, reqs []driver.Request, keys []multiKey, cs []pendingCreate, r result[[]zk.MultiResponse], session int64, sent time.Time) ([]driver.Grant, error) {
	nodes := make([]string, len(cs))
	zxids := make([]int64, len(cs))
	granted := make([]keyVersion, len(cs))
	for i, c := range cs {
		node, stat, err := createOutcome(c.reply(r))
		if err != nil {
			d.undoMulti(ctx, cs, nil)
			return nil, err
		}
		nodes[i], zxids[i] = node, stat.Mzxid
		if k := keys[i]; !k.missing && stat.Czxid != k.czxid {
			d.undoMulti(ctx, cs, nodes)
			d.contend(keys)
			return nil, fmt.Errorf("%s: made again since it was seen free: %w", k.parent, driver.Held(0))
		}
		granted[i] = keyVersion{version: stat.Version, czxid: stat.Czxid}
	}
	if s := d.conn.SessionID(); s != session || s == 0 {
		// The session changed during the multi-operation: ask a node
		// which one they belong to.
		var err error
		if session, err = d.ownerOf(ctx, nodes[0]); err != nil {
			d.undoMulti(ctx, cs, nodes)
			return nil, err
		}
	}
	gs := make([]driver.Grant, len(cs))
	for i, c := range cs {
		g, err := d.grant(ctx, reqs[i], c.parent, c.guid, nodes[i], session, zxids[i], sent)
		if err != nil {
			for _, g := range gs[:i] {
				d.forget(g.State.(*hold))
			}
			d.undoMulti(ctx, cs, nodes)
			return nil, err
		}
		g.State.(*hold).granted = granted[i]
		gs[i] = g
	}
	return gs, nil
}

// undoMulti deletes, in parallel, the nodes that the creates cs of a
// multi-operation may have made (nodes[i] when known, else found by GUID),
// as cleanup does for one.
func (d *zkDriver) undoMulti(ctx context.Context, cs []pendingCreate, nodes []string) {
	var wg sync.WaitGroup
	for i, c := range cs {
		node := ""
		if nodes != nil {
			node = nodes[i]
		}
		wg.Go(func() { d.cleanup(ctx, c.parent, c.guid, node) })
	}
	wg.Wait()
}
