package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// newGUID returns 32 random hex digits.
func newGUID() string {
	var b [guidLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// TryAcquire implements driver.Driver.
func (d *zkDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.acquire(ctx, req, false, false)
	return g, classify(err)
}

// classify marks the ZooKeeper errors no retry can cure: authentication and
// ACL refusals, and bad arguments.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed), errors.Is(err, zk.ErrBadArguments),
		errors.Is(err, zk.ErrInvalidACL), errors.Is(err, zk.ErrInvalidPath), errors.Is(err, zk.ErrClosing),
		errors.Is(err, ErrConnClosed), errors.Is(err, ErrForeignNode):
		return driver.Permanent(err)
	}
	return err
}

// Acquire implements driver.Acquirer: it queues behind the current holder
// and earlier waiters, and waits for its turn.
func (d *zkDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.acquire(ctx, req, true, false)
	return g, classify(err)
}

// acquire takes the lock on req.Key, waiting for it when wait is set.
// cleared reports that this TryLock already deleted the void limit records
// that kept its node from being alone.
func (d *zkDriver) acquire(ctx context.Context, req driver.Request, wait, cleared bool) (driver.Grant, error) {
	parent := d.parentOf(req.Key)
	guid := newGUID()
	session := d.conn.SessionID()
	sent := time.Now()
	// A waiter waits for its turn in the goroutine of its create, when
	// the create's reply shows other nodes: no goroutine and wake-up per
	// round of its own.
	var queue *queued
	if wait {
		queue = new(queued)
	}
	node, pstat, err := d.create(ctx, parent, guid, nodeData(req.Label, req.Data), sent, queue)
	if err != nil {
		return driver.Grant{}, err
	}
	if s := d.conn.SessionID(); s != session || s == 0 {
		// The session changed during the create: ask the node which one it
		// belongs to.
		session, err = d.ownerOf(ctx, node)
		if err != nil {
			d.cleanup(ctx, parent, guid, node)
			return driver.Grant{}, err
		}
	}
	if pstat.NumChildren == 1 { // ours is the only node: the lock is ours
		return d.grant(ctx, req, parent, guid, node, session, pstat.Mzxid, sent)
	}
	if !wait {
		// The queue is listed along with the delete (no added round trip):
		// a foreign child would make every TryLock of the key fail as
		// "held" without a word.
		list := start(d, func() ([]string, error) {
			c, _, err := d.conn.Children(parent)
			return c, err
		})
		d.cleanup(ctx, parent, guid, node)
		select {
		case r := <-list:
			if f := foreignChild(r.v, node[len(parent)+1:]); r.err == nil && f != "" {
				return driver.Grant{}, fmt.Errorf("%w: %s/%s is not a lock node", ErrForeignNode, parent, f)
			}
			// Limit records no lock node is older than rule nothing
			// (a semaphore's last holder crashed after a SetLimit):
			// delete them and try again.
			if rs := voidRecords(r.v, node[len(parent)+1:]); r.err == nil && len(rs) > 0 && !cleared {
				for _, rec := range rs {
					err := call0(ctx, d, func() error { return d.conn.Delete(parent+"/"+rec.name, -1) })
					if err != nil && !errors.Is(err, zk.ErrNoNode) {
						return driver.Grant{}, driver.Held(0)
					}
				}
				return d.acquire(ctx, req, false, true)
			}
		case <-ctx.Done():
		}
		return driver.Grant{}, driver.Held(0)
	}
	if queue.err != nil {
		d.cleanup(ctx, parent, guid, node)
		return driver.Grant{}, queue.err
	}
	g, err := d.grant(ctx, req, parent, guid, node, session, pstat.Mzxid, queue.since)
	g.Queued = queue.waited
	return g, err
}

// queued is the outcome of a waiter's waitTurn, made after its create.
type queued struct {
	since  time.Time
	waited bool
	err    error
}

// create adds our node to the queue of parent, creating parent when it is
// missing, in one multi-operation that also sets parent's (empty) data: the
// reply's stat of parent gives the number of nodes in the queue and, as its
// mzxid, the zxid of our create, our fencing token. On any failure it
// removes what it may have created before returning.
//
// When queue is not nil and the reply shows other nodes in the queue,
// the create's goroutine goes on to wait for our turn (waitTurn, with sent
// as the create's send time) and stores the outcome in *queue. It leaves
// the wait soon after ctx ends, and the reply is then cleaned up as any
// create's whose ctx ended.
func (d *zkDriver) create(ctx context.Context, parent, guid string, data []byte, sent time.Time, queue *queued) (string, *zk.Stat, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return "", nil, err
		}
		acl := d.currentACL()
		ops := createOps(parent, guid, data, acl)
		var turn queued // written before ch receives, read after
		ch := start(d, func() ([]zk.MultiResponse, error) {
			res, err := d.conn.Multi(ops...)
			if queue != nil && err == nil && len(res) == 2 && res[1].Stat != nil && res[1].Stat.NumChildren > 1 {
				if _, ok := strings.CutPrefix(res[0].String, parent+"/"); ok {
					turn.since, turn.waited, turn.err = d.waitTurn(ctx, parent, res[0].String, sent)
				} else {
					turn.err = fmt.Errorf("zookeeper: unexpected lock node %q under %s", res[0].String, parent)
				}
			}
			return res, err
		})
		var r result[[]zk.MultiResponse]
		select {
		case r = <-ch:
		case <-ctx.Done():
			d.abandonCreate(ctx, ch, pendingCreate{parent: parent, guid: guid})
			return "", nil, ctx.Err()
		}
		node, stat, err := createOutcome(r)
		switch {
		case err == nil:
			if queue != nil {
				*queue = turn
			}
			return node, stat, nil
		case d.fallBack(acl, err):
			continue
		case errors.Is(err, zk.ErrNoNode) && attempt < maxParentAttempts:
			if err := d.ensureParent(ctx, parent); err != nil {
				return "", nil, err
			}
			continue
		case mayHaveApplied(err):
			d.cleanup(ctx, parent, guid, "")
		}
		return "", nil, fmt.Errorf("create a lock node under %s: %w", parent, createDenied(r, parent, err))
	}
}

// createOps are the operations that add a lock node carrying guid and data
// to the queue of parent: its creation, and a write of parent's (empty)
// data. Every lock node comes with that write, so parent's data version
// counts the lock nodes ever added to the queue; createOutcome reads their
// replies.
func createOps(parent, guid string, data []byte, acl *nodeACL) []any {
	return []any{
		&zk.CreateRequest{Path: parent + "/" + protectedPrefix + guid + lockMarker, Data: data, Acl: acl.locks, Flags: zk.FlagEphemeral | zk.FlagSequence},
		&zk.SetDataRequest{Path: parent, Data: nil, Version: -1},
	}
}

// createDenied explains a create multi-operation refused by the ACL of the
// key's node: which permission it lacks. Other errors are returned as they
// are.
func createDenied(r result[[]zk.MultiResponse], parent string, err error) error {
	if len(r.v) == 2 && errors.Is(r.v[1].Error, zk.ErrNoAuth) {
		return denied(err, parent, "WRITE")
	}
	return denied(err, parent, "CREATE")
}

// denied explains zk.ErrNoAuth from a call on node p: the ACL of p does not
// grant this connection's identity perm. Other errors are returned as they
// are.
func denied(err error, p, perm string) error {
	if !errors.Is(err, zk.ErrNoAuth) {
		return err
	}
	return fmt.Errorf("the ACL of %s does not grant this connection %s (see zookeeper.Config.ACL; was it changed, or made by another identity?): %w", p, perm, err)
}

// foreignChild returns a child of a key's node, other than our own node
// mine, whose name is neither a lock node's nor a limit record's, when no
// lock node is ahead of mine: the reason our node was not alone. It returns
// "" otherwise.
func foreignChild(children []string, mine string) string {
	seq, ok := sequenceOf(mine)
	if !ok {
		return ""
	}
	foreign := ""
	for _, c := range children {
		s, ok := sequenceOf(c)
		_, rec := parseRecord(c)
		switch {
		case rec:
		case !ok:
			foreign = c
		case s < seq:
			return ""
		}
	}
	return foreign
}

// voidRecords returns the limit records among children that are older
// than our node mine when no lock node is ahead of mine: no lock node is
// older than them, so they rule nothing, and never will.
func voidRecords(children []string, mine string) []record {
	seq, ok := sequenceOf(mine)
	if !ok {
		return nil
	}
	if lineOf(children, mine, seq).pred != "" {
		return nil
	}
	return slices.DeleteFunc(recordsOf(children), func(r record) bool { return r.seq > seq })
}

// createOutcome reads the reply of create's multi-operation.
func createOutcome(r result[[]zk.MultiResponse]) (string, *zk.Stat, error) {
	if r.err != nil {
		return "", nil, r.err
	}
	if len(r.v) != 2 || r.v[0].String == "" || r.v[1].Stat == nil {
		return "", nil, fmt.Errorf("zookeeper: unexpected reply to a create multi-operation: %d results", len(r.v))
	}
	return r.v[0].String, r.v[1].Stat, nil
}

// mayHaveApplied reports whether a write that failed with err may still have
// been applied: true unless the server refused it, or the session (and so
// every ephemeral node it could have created) is gone.
func mayHaveApplied(err error) bool {
	for _, definite := range []error{
		zk.ErrNoNode, zk.ErrNoAuth, zk.ErrInvalidACL, zk.ErrBadArguments, zk.ErrNodeExists,
		zk.ErrNoChildrenForEphemerals, zk.ErrBadVersion, zk.ErrNotEmpty, zk.ErrSessionExpired,
		zk.ErrAPIError, zk.ErrInvalidPath, zk.ErrInvalidFlags,
	} {
		if errors.Is(err, definite) {
			return false
		}
	}
	return true
}

// pendingCreate is a lock node create sent in a multi-operation: the
// node's queue and GUID, and the index of its createOps in the operations.
type pendingCreate struct {
	parent, guid string
	at           int
}

// reply is the part of r, the reply of the multi-operation, that answers
// c's createOps, as createOutcome reads it.
func (c pendingCreate) reply(r result[[]zk.MultiResponse]) result[[]zk.MultiResponse] {
	if len(r.v) < c.at+2 {
		return result[[]zk.MultiResponse]{err: r.err}
	}
	return result[[]zk.MultiResponse]{v: r.v[c.at : c.at+2], err: r.err}
}

// abandonCreate cleans up, in the background (Close waits for it), after a
// multi-operation of creates whose caller's ctx ended while it was in
// flight: each node is deleted once the outcome is known, at once if it is
// known within the cleanup timeout, else by the janitor. Deleting before
// the reply came could run ahead of the create and leave the node behind.
func (d *zkDriver) abandonCreate(ctx context.Context, ch <-chan result[[]zk.MultiResponse], cs ...pendingCreate) {
	d.cleanups.add()
	go func() {
		defer d.cleanups.done()
		d.settleAbandoned(ctx, ch, cs)
	}()
}

// settleAbandoned is the work of abandonCreate.
func (d *zkDriver) settleAbandoned(ctx context.Context, ch <-chan result[[]zk.MultiResponse], cs []pendingCreate) {
	cctx, cancel := d.cleanupContext(ctx)
	defer cancel()
	select {
	case r := <-ch:
		var wg sync.WaitGroup
		for _, c := range cs {
			if o := settleCreate(c.parent, c.guid, c.reply(r)); o != nil {
				wg.Go(func() {
					if err := d.deleteOrphan(cctx, o); err != nil {
						d.addOrphan(o)
					}
				})
			}
		}
		wg.Wait()
	case <-cctx.Done():
		for i, c := range d.splitReply(ch, cs) {
			d.addOrphan(&orphan{parent: cs[i].parent, guid: cs[i].guid, create: c})
		}
	}
}

// splitReply returns, for each create of cs, a channel that receives its
// part of the reply that ch receives.
func (d *zkDriver) splitReply(ch <-chan result[[]zk.MultiResponse], cs []pendingCreate) []<-chan result[[]zk.MultiResponse] {
	outs := make([]chan result[[]zk.MultiResponse], len(cs))
	ins := make([]<-chan result[[]zk.MultiResponse], len(cs))
	for i := range cs {
		outs[i] = make(chan result[[]zk.MultiResponse], 1)
		ins[i] = outs[i]
	}
	d.calls.add()
	go func() {
		defer d.calls.done()
		r := <-ch
		for i, c := range cs {
			outs[i] <- c.reply(r)
		}
	}()
	return ins
}

// settleCreate turns the outcome of an abandoned create into the orphan to
// delete, or nil when nothing was created.
func settleCreate(parent, guid string, r result[[]zk.MultiResponse]) *orphan {
	node, _, err := createOutcome(r)
	switch {
	case err == nil:
		return &orphan{parent: parent, guid: guid, path: node}
	case mayHaveApplied(err):
		return &orphan{parent: parent, guid: guid}
	}
	return nil
}

// ensureParent creates the key's parent container node, and the root's
// missing nodes when needed.
func (d *zkDriver) ensureParent(ctx context.Context, parent string) error {
	err := d.createContainer(ctx, parent)
	if !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	for _, p := range ancestors(d.root) {
		if err := d.createContainer(ctx, p); err != nil {
			return err
		}
	}
	return d.createContainer(ctx, parent)
}

// createContainer creates a container node at p; an existing node is fine.
func (d *zkDriver) createContainer(ctx context.Context, p string) error {
	for {
		acl := d.currentACL()
		_, err := call(ctx, d, func() (string, error) { return d.conn.CreateContainer(p, nil, zk.FlagContainer, acl.containers) })
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return nil
		case d.fallBack(acl, err):
			continue
		}
		return fmt.Errorf("create container node %s: %w", p, err)
	}
}
