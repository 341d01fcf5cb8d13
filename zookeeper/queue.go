package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// waitTurn waits until node is the first of parent's queue. It returns a
// moment after which the session was alive, for the grant's validity, and
// whether it waited for another node to go.
//
// A waiter lists the queue and watches the node just before ours (pred),
// and the one before that (pp): a deletion wakes two waiters, never the
// whole queue. A hand-off needs no round trip after the deletion's event
// when the waiter saw pred first in line:
//
//   - When pred was first in line in our last listing, no other node is
//     ahead of ours (later nodes get higher sequence numbers; a listing,
//     from any server, shows every node before ours that still exists, as
//     it comes after our create in the session's order): its deletion
//     makes ours first, and the lock is ours when the event arrives.
//   - When the node before pred (pp) was first in line, we watch it too,
//     and its deletion makes pred first by the same reasoning, with no
//     listing.
//   - From farther back we watch pp too. Its deletion (most often its
//     release, which hands the lock to pred) is followed by a listing, as
//     pp may have given up while others were ahead of it; that listing is
//     made while pred holds the lock, off the hand-off's path, and shows
//     pred first, so that pred's deletion grants the lock with no listing.
//     On a long queue this costs a request more per waiter than
//     go-zookeeper's recipe and takes a round trip off every hand-off.
//   - A watch that finds its node gone already tells what the node's
//     deletion event would have: no listing follows it in the first two
//     cases.
//   - Otherwise, and when pred went while pp was there (pred gave up), we
//     list again.
//
// Proof of life: the create was a write, which the leader accepts only
// while the session lives, so its send time (sent) is such a moment. While
// that proof is fresh (younger than a quarter of the validity, so that the
// grant leaves the engine its whole renewal schedule) a round needs no
// other, and only a fresh proof lets a deletion event grant the lock. A
// round after a longer wait syncs with the leader, sent with the list in
// the same round trip: a sync the leader answers proves the session alive
// after it was sent. A list from any server, however far behind the
// leader, that shows no node before ours shows the leader none either
// (nodes before ours are only ever deleted), so the list needs not wait for
// the sync.
//
// waitTurn makes its calls in the caller's goroutine: it runs in the
// goroutine of our create (see create), which it leaves soon after ctx
// ends.
func (d *zkDriver) waitTurn(ctx context.Context, parent, node string, sent time.Time) (since time.Time, waited bool, err error) {
	name := node[len(parent)+1:]
	seq, ok := sequenceOf(name)
	if !ok {
		return time.Time{}, false, fmt.Errorf("zookeeper: unexpected lock node name %q", name)
	}
	since = sent
	// The watches set and not fired yet, by node path: a node watched in
	// one round and still there in the next is not watched again.
	watches := map[string]<-chan zk.Event{}
	var t turn
	list := true
	for {
		if list {
			if err := ctx.Err(); err != nil {
				return time.Time{}, false, err
			}
			var synced <-chan result[string]
			if !d.fresh(since) {
				since = time.Now()
				synced = start(d, func() (string, error) { return d.conn.Sync(parent) })
			}
			t, err = d.listTurn(parent, name, seq, watches)
			if err != nil {
				return time.Time{}, false, fmt.Errorf("list the queue %s: %w", parent, denied(err, parent, "READ"))
			}
			if synced != nil {
				select {
				case r := <-synced:
					if r.err != nil {
						return time.Time{}, false, fmt.Errorf("sync %s: %w", parent, r.err)
					}
				case <-ctx.Done():
					return time.Time{}, false, ctx.Err()
				}
			}
		}
		// The watches listTurn set. A watched node already gone tells what
		// its deletion event would have told.
		predGone, ppGone := false, false
		for _, w := range t.watched[:t.set] {
			switch {
			case w.err == nil:
				watches[w.path] = w.ev
			case errors.Is(w.err, zk.ErrNoNode) && w.path == parent+"/"+t.at.pp:
				ppGone = true
			case errors.Is(w.err, zk.ErrNoNode):
				predGone = true
			default:
				return time.Time{}, false, fmt.Errorf("watch %s: %w", w.path, w.err)
			}
		}
		children, at := t.children, t.at
		t = turn{}
		list = true
		if !at.found {
			return time.Time{}, false, errNodeGone
		}
		if at.pred == "" {
			d.clearRecords(parent, voidRecords(children, name))
			return since, waited, nil
		}
		if ppGone {
			if at.ahead > 2 {
				continue // pp was not first: look again
			}
			// pp was first: pred is now, as our listing would show.
			at = line{found: true, ahead: 1, pred: at.pred}
		}
		if predGone {
			if at.ahead == 1 && d.fresh(since) {
				// pred was first: ours is now.
				return since, true, nil
			}
			continue // look again
		}
		// The node before pred is watched too, when there is one.
		predPath, watchPP := parent+"/"+at.pred, ""
		if at.ahead >= 2 {
			watchPP = parent + "/" + at.pp
		}
		if err := d.watchAll(ctx, watches, predPath, watchPP); err != nil {
			if errors.Is(err, zk.ErrNoNode) {
				continue // gone already: look again
			}
			return time.Time{}, false, err
		}
		select {
		case ev := <-watches[predPath]:
			delete(watches, predPath)
			if ev.Err != nil {
				return time.Time{}, false, fmt.Errorf("watch %s: %w", predPath, ev.Err)
			}
			waited = true
			if at.ahead == 1 && ev.Type == zk.EventNodeDeleted && d.fresh(since) {
				return since, true, nil
			}
		case ev := <-watches[watchPP]: // never ready when watchPP is "": a nil channel
			delete(watches, watchPP)
			if ev.Err != nil {
				return time.Time{}, false, fmt.Errorf("watch %s: %w", watchPP, ev.Err)
			}
			waited = true
			if at.ahead == 2 && ev.Type == zk.EventNodeDeleted {
				// pp was first: pred is now, as our listing would show.
				t.children = slices.DeleteFunc(children, func(c string) bool { return c == at.pp })
				t.at = line{found: true, ahead: 1, pred: at.pred}
				list = false
			}
		case <-ctx.Done():
			return time.Time{}, false, ctx.Err()
		}
	}
}

// turn is a round of a waiter's wait: a listing of its queue, where the
// waiter's node stands in it, and the watches set after it.
type turn struct {
	children []string
	at       line
	watched  [2]watched
	set      int // how many of watched were set
}

// watched is the outcome of watching the node at path.
type watched struct {
	path string
	ev   <-chan zk.Event
	err  error
}

// line is where a lock node stands in its queue, as a listing shows it.
type line struct {
	found bool   // the node is in the listing
	ahead int    // how many lock nodes are before it
	pred  string // the lock node just before it, "" when it is first
	pp    string // the lock node just before pred, "" when pred is first
}

// lineOf reads where the lock node name, whose sequence is seq, stands in
// the queue children, in one pass. Names that are not lock nodes are
// ignored.
func lineOf(children []string, name string, seq int64) line {
	var l line
	var predSeq, ppSeq int64
	for _, c := range children {
		if c == name {
			l.found = true
			continue
		}
		s, ok := sequenceOf(c)
		if !ok || s >= seq {
			continue
		}
		l.ahead++
		switch {
		case l.pred == "" || s > predSeq:
			l.pp, ppSeq = l.pred, predSeq
			l.pred, predSeq = c, s
		case l.pp == "" || s > ppSeq:
			l.pp, ppSeq = c, s
		}
	}
	return l
}

// listTurn lists the queue of parent and then sets the watches waitTurn
// sets after such a listing (on the node before ours, name with sequence
// seq, and on the one before that when there is one) that watches does not
// hold yet, in the caller's goroutine. When the node two ahead is first in
// line its deletion may come at any moment and make ours next, so its
// watch is set in parallel; from farther back there is time, and the
// second watch follows the first. An error is the listing's; the watches'
// are in the turn.
func (d *zkDriver) listTurn(parent, name string, seq int64, watches map[string]<-chan zk.Event) (turn, error) {
	c, _, err := d.conn.Children(parent)
	if err != nil {
		return turn{}, err
	}
	t := turn{children: c, at: lineOf(c, name, seq)}
	if !t.at.found || t.at.pred == "" {
		return t, nil
	}
	var paths [2]string
	n := 0
	add := func(p string) {
		if watches[p] == nil {
			paths[n] = p
			n++
		}
	}
	add(parent + "/" + t.at.pred)
	if t.at.ahead >= 2 {
		add(parent + "/" + t.at.pp)
	}
	if n == 0 {
		return t, nil
	}
	var second <-chan result[<-chan zk.Event]
	if n == 2 && t.at.ahead == 2 {
		second = start(d, func() (<-chan zk.Event, error) { return d.watch(paths[1]) })
	}
	for i, p := range paths[:n] {
		if i == 1 && second != nil {
			r := <-second
			t.watched[i] = watched{p, r.v, r.err}
		} else {
			ev, err := d.watch(p)
			t.watched[i] = watched{p, ev, err}
		}
		t.set = i + 1
	}
	return t, nil
}

// watchAll sets a watch on each of the nodes paths ("" skipped) that has
// none pending in watches, in parallel, and records them there by path.
func (d *zkDriver) watchAll(ctx context.Context, watches map[string]<-chan zk.Event, paths ...string) error {
	type set struct {
		path string
		r    <-chan result[<-chan zk.Event]
	}
	var sets []set
	for _, p := range paths {
		if p == "" || watches[p] != nil {
			continue
		}
		sets = append(sets, set{p, start(d, func() (<-chan zk.Event, error) { return d.watch(p) })})
	}
	var first error
	for _, s := range sets {
		select {
		case r := <-s.r:
			switch {
			case r.err == nil:
				watches[s.path] = r.v
			case errors.Is(r.err, zk.ErrNoNode):
				first = cmp.Or(first, r.err)
			default:
				first = fmt.Errorf("watch %s: %w", s.path, r.err)
				return first
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

// watch sets a watch on node p, returning zk.ErrNoNode when it is gone. It
// uses getData, which sets no watch on a missing node (exists would leave a
// watch for its creation behind, and lock nodes are never created again).
// ZooKeeper delivers no event of a node its watcher may not read, so a node
// we may not read is an error rather than a wait that never ends.
//
// A node named like a lock node that is not ephemeral was made by someone
// else: no session ends it, so waiting behind it would never end.
func (d *zkDriver) watch(p string) (<-chan zk.Event, error) {
	_, st, ch, err := d.conn.GetW(p)
	switch {
	case errors.Is(err, zk.ErrNoAuth):
		return nil, fmt.Errorf("cannot watch %s: every identity locking a key needs READ on the others' nodes: %w", p, denied(err, p, "READ"))
	case err != nil:
		return nil, err
	case st.EphemeralOwner == 0:
		return nil, fmt.Errorf("%w: it is not ephemeral", ErrForeignNode)
	}
	return ch, nil
}

// head returns the holder's node among a queue's children (the lock node
// with the lowest sequence, "" when there is none) and how many lock nodes
// there are.
func head(children []string) (first string, n int) {
	var firstSeq int64
	for _, c := range children {
		seq, ok := sequenceOf(c)
		if !ok {
			continue
		}
		n++
		if first == "" || seq < firstSeq {
			first, firstSeq = c, seq
		}
	}
	return first, n
}

// sequenceOf parses the sequence number ZooKeeper appended to a lock node's
// name.
func sequenceOf(name string) (int64, bool) {
	if !strings.HasPrefix(name, protectedPrefix) {
		return 0, false
	}
	i := strings.LastIndex(name, lockMarker)
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(name[i+len(lockMarker):], 10, 64)
	return n, err == nil
}

// guidOf returns the protection GUID of a lock node's name, or "".
func guidOf(name string) string {
	if !strings.HasPrefix(name, protectedPrefix) || len(name) < len(protectedPrefix)+guidLen {
		return ""
	}
	return name[len(protectedPrefix) : len(protectedPrefix)+guidLen]
}
