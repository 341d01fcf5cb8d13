package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// shareMarker starts the part of a shared hold's node name that follows
// its GUID: _c_<guid>-s<mode>.<weight>.<limit>-lock-<sequence>. The node
// is a lock node of the key's queue, so a plain lock queues behind it.
const shareMarker = "-s"

// share is a shared hold's node as named in the key's queue.
type share struct {
	name   string
	seq    int64
	mode   driver.Mode
	weight int
	limit  int
	plain  bool // a plain lock's node
}

// shareTag is the part of the node name of a hold of s after its GUID.
func shareTag(s driver.Share) string {
	return fmt.Sprintf("%s%d.%d.%d", shareMarker, s.Mode, s.Weight, s.Limit)
}

// parseShare reads a lock node's name; ok is false for other children.
func parseShare(name string) (sh share, ok bool) {
	seq, ok := sequenceOf(name)
	if !ok || len(name) < len(protectedPrefix)+guidLen {
		return sh, false
	}
	sh = share{name: name, seq: seq, plain: true}
	tag := name[len(protectedPrefix)+guidLen : strings.LastIndex(name, lockMarker)]
	f := strings.Split(strings.TrimPrefix(tag, shareMarker), ".")
	if !strings.HasPrefix(tag, shareMarker) || len(f) != 3 {
		return sh, true
	}
	mode, err1 := strconv.Atoi(f[0])
	weight, err2 := strconv.Atoi(f[1])
	limit, err3 := strconv.Atoi(f[2])
	if errors.Join(err1, err2, err3) != nil || weight < 1 {
		return sh, true
	}
	sh.mode, sh.weight, sh.limit, sh.plain = driver.Mode(mode), weight, limit, false
	return sh, true
}

// queueOf returns the lock nodes among children, in sequence order.
func queueOf(children []string) []share {
	return parseSorted(children, parseShare, func(sh share) int64 { return sh.seq })
}

// kind names what a key is whose first node is of mode and whose limit is
// limit.
func kind(mode driver.Mode, limit int) string {
	if mode == driver.Permits {
		return fmt.Sprintf("a semaphore of %d permits", limit)
	}
	return "a read-write lock"
}

// conflict returns the ErrConflict of a request of s on a key whose first
// node is first and whose limit is limit (see keyLimit), or nil when s may
// join it.
func conflict(first share, limit int, s driver.Share) error {
	want := kind(s.Mode, s.Limit)
	switch {
	case first.plain:
		return fmt.Errorf("%w: the key is a plain lock, not %s", driver.ErrConflict, want)
	case (first.mode == driver.Permits) != (s.Mode == driver.Permits):
		return fmt.Errorf("%w: the key is %s, not %s", driver.ErrConflict, kind(first.mode, limit), want)
	case s.Mode == driver.Permits && limit != s.Limit:
		return fmt.Errorf("%w: the key is a semaphore of %d permits, not %d", driver.ErrConflict, limit, s.Limit)
	}
	return nil
}

// fits reports whether a hold of s may be held behind the nodes ahead of
// it (holders and waiters, in sequence order): a writer must be first, a
// reader needs no writer ahead, permits need the weights ahead and their
// own to fit the limit. A plain lock's node blocks everything.
func fits(ahead []share, s driver.Share) bool {
	used := s.Weight
	for _, sh := range ahead {
		if sh.plain || s.Mode == driver.Write || sh.mode != s.Mode {
			return false
		}
		used += sh.weight
	}
	return s.Mode != driver.Permits || used <= s.Limit
}

// TryAcquireShared implements driver.Sharer, as Curator's semaphore and
// read-write lock recipes do: each holder or waiter is an ephemeral
// sequential node of the key's queue whose name carries its mode, weight
// and limit. The driver remembers the node of a request that queued, for
// its later attempts; a first attempt creates its node at once. The request
// holds once the nodes ahead of it fit (see fits). The key's limit is its
// ruling limit record's, else the first node's (see keyLimit), read in the
// listing that shows the queue. A request that does not fit keeps its node
// when it queues, and deletes it when it does not. A crashed holder's node
// goes with its session.
//
// A grant's token is the zxid of a write of the key's node's data: every
// create writes it (see createOps), so a first attempt's token is its
// create's. A waiter that fits is granted by its listing, with its node's
// czxid as its token, when that data was not written since its create (see
// waiter): no token of the key is above it then. Otherwise it claims: it
// writes that data again, and the claim's zxid is its token. Its czxid
// would not do then: a later arrival may have been granted behind it, or
// another waiter may have claimed, with a greater token.
func (d *zkDriver) TryAcquireShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
	g, err := d.tryAcquireShared(ctx, req, s)
	return g, classify(err)
}

// waiter is a shared request waiting in line.
type waiter struct {
	node    string
	session int64 // the session that made node
	czxid   int64 // node's czxid, the zxid of its create
	// claim is set once a listing showed the key's node's data written
	// since node's create: a later arrival came, or someone claimed. The
	// grant must then claim, as the node's czxid is not above every token
	// of the key any more (the data's mzxid only grows), and the claim is
	// sent with the listing.
	claim bool
}

// handedOn reports whether a waiter w that fits may be granted by the
// listing that showed parent's stat listed, with no write: no write of the
// key's node's data since w's create. Every token of the key is the zxid
// of such a write (a create's, this version's claims, and an older
// version's, which claimed at every grant from the line), so each token
// handed out before is at most w.czxid, and the only write at w.czxid is
// w's own create, which granted nothing: w.czxid is above every token
// handed out before. Every later token is a later write's, above it.
func handedOn(w waiter, listed *zk.Stat) bool {
	return !w.claim && listed != nil && listed.Mzxid == w.czxid
}

func (d *zkDriver) tryAcquireShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
	parent := d.parentOf(req.Key)
	tag := newGUID() + shareTag(s)
	sent := time.Now()
	// Only a request that queued has a node to find: the first attempt
	// creates one at once.
	d.mu.Lock()
	w := d.queued[req.Owner]
	delete(d.queued, req.Owner)
	d.mu.Unlock()
	node := w.node
	if w.session != d.conn.SessionID() {
		node = "" // gone with the session that made it: queue again
	}
	var children []string
	var listed *zk.Stat // the key's node, as the listing showed it
	var err error
	var claim <-chan result[[]zk.MultiResponse]
	var synced <-chan result[string]
	if node != "" {
		// A waiter that must claim sends its claim along with the listing
		// (one round trip), wasted when it does not fit. One that may be
		// handed on sends a sync instead, which the leader answers: it
		// proves the session alive after sent, and the listing sent behind
		// it shows what the leader did before it.
		sent = time.Now()
		if w.claim {
			claim = d.claim(parent, node)
			// Let the claim reach the connection's queue first, as a
			// rule: the server then lists after it. A claim's check at
			// the grant covers the other order.
			runtime.Gosched()
		} else {
			// The sync must reach the server before the listing: a
			// follower that lags would otherwise list without a later
			// arrival's claim, and the czxid token would fall below
			// that claim's. go-zookeeper orders only calls made one
			// after the other, so the listing waits for the sync's answer.
			_, err := call(ctx, d, func() (string, error) { return d.conn.Sync(parent) })
			r := make(chan result[string], 1)
			r <- result[string]{err: err}
			synced = r
		}
		if children, listed, err = d.children(ctx, parent); err != nil && !errors.Is(err, zk.ErrNoNode) {
			d.cleanup(ctx, parent, tag, node)
			return driver.Grant{}, err
		}
		if d.hooks.afterListing != nil {
			d.hooks.afterListing()
		}
		if !slices.Contains(children, node[len(parent)+1:]) {
			node = "" // gone with its session, or deleted: queue again
		}
	}
	fresh := node == ""
	var zxid int64
	session := w.session
	if fresh {
		session = d.conn.SessionID()
		var pstat *zk.Stat
		if node, pstat, err = d.create(ctx, parent, tag, []byte(req.Label), time.Time{}, nil); err != nil {
			return driver.Grant{}, err
		}
		if s := d.conn.SessionID(); s != session || s == 0 {
			// The session changed during the create (or was not
			// known yet): ask the node which one it belongs to.
			if session, err = d.ownerOf(ctx, node); err != nil {
				d.cleanup(ctx, parent, tag, node)
				return driver.Grant{}, err
			}
		}
		zxid = pstat.Mzxid
		w = waiter{node: node, session: session, czxid: zxid}
		if pstat.NumChildren > 1 {
			if children, listed, err = d.children(ctx, parent); err != nil {
				d.cleanup(ctx, parent, tag, node)
				return driver.Grant{}, err
			}
		} else {
			children, listed = []string{node[len(parent)+1:]}, pstat
		}
	}
	q, rs := queueOf(children), recordsOf(children)
	mine := slices.IndexFunc(q, func(sh share) bool { return parent+"/"+sh.name == node })
	if mine < 0 {
		d.cleanup(ctx, parent, tag, node)
		return driver.Grant{}, errNodeGone
	}
	d.clearRecords(parent, stale(q, rs))
	if err := conflict(q[0], keyLimit(q, rs), s); err != nil {
		d.cleanup(ctx, parent, tag, node)
		return driver.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		d.cleanup(ctx, parent, tag, node)
		return driver.Grant{}, err
	}
	if !fits(q[:mine], s) {
		if !s.Queue {
			d.cleanup(ctx, parent, tag, node)
			return driver.Grant{}, driver.Held(0)
		}
		w.claim = !handedOn(w, listed)
		d.mu.Lock()
		if d.queued == nil {
			d.queued = make(map[string]waiter)
		}
		d.queued[req.Owner] = w
		d.mu.Unlock()
		owner := req.Owner
		return driver.Grant{}, &driver.Residue{Err: driver.Held(req.TTL / 3), Cleanup: func(ctx context.Context) error {
			d.mu.Lock()
			if d.queued[owner].node == node {
				delete(d.queued, owner)
			}
			d.mu.Unlock()
			err := call0(ctx, d, func() error { return d.conn.Delete(node, -1) })
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			return classify(err)
		}}
	}
	if !fresh {
		if zxid, err = d.grantFromLine(ctx, parent, node, s, w, listed, synced, claim); err != nil {
			d.cleanup(ctx, parent, tag, node)
			return driver.Grant{}, err
		}
	}
	if s := d.conn.SessionID(); s != session || s == 0 {
		// The session changed during the attempt: ask the node which
		// one it belongs to.
		if session, err = d.ownerOf(ctx, node); err != nil {
			d.cleanup(ctx, parent, tag, node)
			return driver.Grant{}, err
		}
	}
	g, err := d.grant(ctx, req, parent, tag, node, session, zxid, sent)
	g.Queued = !fresh
	return g, err
}

// claim sends the claim of the waiter whose node is node: a write to the
// key's node parent (lock nodes are read-only), whose zxid is the token,
// with a check that node is still there. A write proves the session alive.
func (d *zkDriver) claim(parent, node string) <-chan result[[]zk.MultiResponse] {
	ops := []any{
		&zk.CheckVersionRequest{Path: node, Version: -1},
		&zk.SetDataRequest{Path: parent, Data: nil, Version: -1},
	}
	return start(d, func() ([]zk.MultiResponse, error) {
		if d.hooks.beforeClaim != nil {
			d.hooks.beforeClaim()
		}
		return d.conn.Multi(ops...)
	})
}

// grantFromLine returns the token of waiter w, whose node fits in the
// listing that showed parent's stat listed: its czxid when it is handed
// on (synced is the sync sent with that listing), else its claim's zxid
// (claim, when sent with the listing, else sent now). A record SetLimit
// wrote before the claim rules a claimed grant: the key is listed again
// when the claim came after the listing and the key's children changed in
// between.
func (d *zkDriver) grantFromLine(ctx context.Context, parent, node string, s driver.Share, w waiter, listed *zk.Stat,
	synced <-chan result[string], claim <-chan result[[]zk.MultiResponse]) (int64, error) {
	if synced != nil && handedOn(w, listed) {
		select {
		case r := <-synced:
			if r.err != nil {
				return 0, fmt.Errorf("sync %s: %w", parent, r.err)
			}
			return w.czxid, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if claim == nil {
		claim = d.claim(parent, node)
	}
	var r result[[]zk.MultiResponse]
	select {
	case r = <-claim:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	res, err := r.v, r.err
	if err == nil && (len(res) != 2 || res[1].Stat == nil) {
		err = fmt.Errorf("zookeeper: unexpected reply to a claim multi-operation: %d results", len(res))
	}
	if err != nil {
		return 0, fmt.Errorf("claim %s: %w", node, denied(err, parent, "WRITE"))
	}
	zxid := res[1].Stat.Mzxid
	if listed == nil || (listed.Mzxid < zxid && listed.Pzxid != res[1].Stat.Pzxid) {
		// The listing was served before the claim, and the key's
		// children changed in between: a limit record written before
		// the claim may be missing from it.
		if err := d.recheckLimit(ctx, parent, node, s); err != nil {
			return 0, err
		}
	}
	return zxid, nil
}

// children lists parent's children, and returns parent's stat with them.
func (d *zkDriver) children(ctx context.Context, parent string) ([]string, *zk.Stat, error) {
	type listing struct {
		children []string
		stat     *zk.Stat
	}
	l, err := call(ctx, d, func() (listing, error) {
		c, st, err := d.conn.Children(parent)
		return listing{c, st}, err
	})
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		err = fmt.Errorf("list the queue %s: %w", parent, denied(err, parent, "READ"))
	}
	return l.children, l.stat, err
}

// sharedHolders returns the nodes of q (a queue whose first node is a
// shared hold's) that hold the key: those that fit behind the nodes ahead
// of them, with the limit they were granted with, their own (SetLimit may
// have lowered the key's since).
func sharedHolders(q []share) []share {
	var held []share
	for i, sh := range q {
		if sh.plain || !fits(q[:i], driver.Share{Mode: sh.mode, Weight: sh.weight, Limit: sh.limit}) {
			break
		}
		held = append(held, sh)
	}
	return held
}

// inspectShared is Inspect of a key whose queue q starts with a shared
// hold: each holder's data is its label, its ctime when it queued, and its
// czxid its token, or a lower number for a hold granted by a claim.
func (d *zkDriver) inspectShared(ctx context.Context, parent string, q []share, rs []record) (driver.Status, error) {
	held := sharedHolders(q)
	st := driver.Status{Waiters: len(q) - len(held)}
	if q[0].mode == driver.Permits {
		st.Limit = keyLimit(q, rs)
	}
	for _, sh := range held {
		data, stat, err := d.conn.Get(parent + "/" + sh.name)
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile
		}
		if err != nil {
			return driver.Status{}, fmt.Errorf("zookeeper: read %s/%s: %w", parent, sh.name, err)
		}
		h := driver.Holder{Mode: sh.mode, Weight: sh.weight, Label: string(data), Token: uint64(stat.Czxid),
			Acquired: time.UnixMilli(stat.Ctime).UTC()}
		st.Holders = append(st.Holders, h)
		if h.Token >= st.Token {
			st.Held, st.Label, st.Token, st.Acquired = true, h.Label, h.Token, h.Acquired
		}
	}
	return st, ctx.Err()
}

// breakShared deletes the nodes that hold a key whose queue q starts with
// a shared hold.
func (d *zkDriver) breakShared(ctx context.Context, parent string, q []share) error {
	var errs []error
	for _, sh := range sharedHolders(q) {
		err := call0(ctx, d, func() error { return d.conn.Delete(parent+"/"+sh.name, -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			errs = append(errs, fmt.Errorf("zookeeper: delete %s/%s: %w", parent, sh.name, classify(err)))
		}
	}
	return errors.Join(errs...)
}
