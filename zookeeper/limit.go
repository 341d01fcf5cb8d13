package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// recordPrefix starts the name of a limit record: a persistent sequential
// child of a key's node, _limit_<limit>_<sequence>, that SetLimit makes.
// It is no lock node (they start with protectedPrefix), so the queue
// ignores it, and the listing that shows the queue shows the limit too.
const recordPrefix = "_limit_"

// record is a limit record as named among a key's children.
type record struct {
	name  string
	seq   int64
	limit int
}

// recordName is the name, before ZooKeeper appends the sequence, of the
// record of limit.
func recordName(limit int) string { return recordPrefix + strconv.Itoa(limit) + "_" }

// parseRecord reads a limit record's name; ok is false for other children.
func parseRecord(name string) (r record, ok bool) {
	rest, ok := strings.CutPrefix(name, recordPrefix)
	if !ok {
		return r, false
	}
	l, s, ok := strings.Cut(rest, "_")
	limit, err1 := strconv.Atoi(l)
	seq, err2 := strconv.ParseInt(s, 10, 64)
	if !ok || errors.Join(err1, err2) != nil || limit < 1 {
		return r, false
	}
	return record{name: name, seq: seq, limit: limit}, true
}

// recordsOf returns the limit records among children, in sequence order.
func recordsOf(children []string) []record {
	return parseSorted(children, parseRecord, func(r record) int64 { return r.seq })
}

// parseSorted returns the children that parse reads, in the order of seq.
func parseSorted[T any](children []string, parse func(string) (T, bool), seq func(T) int64) []T {
	var out []T
	for _, c := range children {
		if v, ok := parse(c); ok {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(seq(a), seq(b)) })
	return out
}

// mark adds p to the set *m, and reports false when it was there already.
func (d *zkDriver) mark(m *map[string]struct{}, p string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := (*m)[p]; ok {
		return false
	}
	if *m == nil {
		*m = make(map[string]struct{})
	}
	(*m)[p] = struct{}{}
	return true
}

// unmark removes p from the set *m.
func (d *zkDriver) unmark(m *map[string]struct{}, p string) {
	d.mu.Lock()
	delete(*m, p)
	d.mu.Unlock()
}

// ruling returns the record that rules the key whose queue is q, if any:
// the last one, while a lock node older than it is left. Every node of the
// queue then joined it before SetLimit wrote the record, or behind such a
// node, without a moment when the queue was empty: the key kept holders or
// waiters since. A record with no older node is void for good (nodes made
// later get higher sequences), as is every record before the last.
func ruling(q []share, rs []record) (record, bool) {
	if len(q) == 0 || len(rs) == 0 || q[0].seq > rs[len(rs)-1].seq {
		return record{}, false
	}
	return rs[len(rs)-1], true
}

// keyLimit returns the limit of the key whose queue is q (not empty) and
// whose records are rs: the ruling record's, else the first node's.
func keyLimit(q []share, rs []record) int {
	if r, ok := ruling(q, rs); ok {
		return r.limit
	}
	return q[0].limit
}

// stale returns the records of rs that do not rule the key whose queue is
// q: any Locker may delete them.
func stale(q []share, rs []record) []record {
	if r, ok := ruling(q, rs); ok {
		return slices.DeleteFunc(slices.Clone(rs), func(o record) bool { return o == r })
	}
	return rs
}

// clearRecords deletes the records rs of parent in the background, each
// once at a time; a failure leaves it to the next Locker that lists the
// key.
func (d *zkDriver) clearRecords(parent string, rs []record) {
	for _, r := range rs {
		p := parent + "/" + r.name
		if !d.mark(&d.clearing, p) {
			continue
		}
		start(d, func() (struct{}, error) {
			err := d.conn.Delete(p, -1)
			d.unmark(&d.clearing, p)
			return struct{}{}, err
		})
	}
}

// recheckLimit lists parent again, after the claim of node (a waiter's)
// was applied, and returns the ErrConflict of s on the key then, if any.
func (d *zkDriver) recheckLimit(ctx context.Context, parent, node string, s driver.Share) error {
	children, _, err := d.children(ctx, parent)
	if err != nil {
		return err
	}
	q, rs := queueOf(children), recordsOf(children)
	if !slices.ContainsFunc(q, func(sh share) bool { return parent+"/"+sh.name == node }) {
		return errNodeGone
	}
	return conflict(q[0], keyLimit(q, rs), s)
}

// SetLimit implements driver.Limiter. It syncs with the leader, lists the
// key's node and, when the key is a semaphore with another limit, writes a
// new record in one multi-operation: a check that the first node of the
// listing is still there (so the key is still that semaphore), the
// deletion of the records listed (so a concurrent SetLimit makes it list
// again), and the new record. The record's creation is a change of the
// key's children, which the watches of the key's waiters see. The record
// rules while a node older than it is left (see ruling); this Locker
// deletes it once none is, and so does any Locker that lists the key when
// this one is gone.
func (d *zkDriver) SetLimit(ctx context.Context, key string, limit int) error {
	parent := d.parentOf(key)
	for {
		// A server behind the leader could list the key as it was before
		// holders that a caller saw granted: sync first.
		if _, err := call(ctx, d, func() (string, error) { return d.conn.Sync(parent) }); err != nil {
			return fmt.Errorf("setlimit: sync %s: %w", parent, classify(err))
		}
		children, _, err := d.children(ctx, parent)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("setlimit: %w", classify(err))
		}
		q, rs := queueOf(children), recordsOf(children)
		switch {
		case len(q) == 0:
			d.clearRecords(parent, rs)
			return nil
		case q[0].plain:
			return fmt.Errorf("setlimit: %w: the key is a plain lock, not a semaphore", driver.ErrConflict)
		case q[0].mode != driver.Permits:
			return fmt.Errorf("setlimit: %w: the key is a read-write lock, not a semaphore", driver.ErrConflict)
		}
		if keyLimit(q, rs) == limit {
			d.clearRecords(parent, stale(q, rs))
			if r, ok := ruling(q, rs); ok {
				d.followRecord(parent, r)
			}
			return nil
		}
		if d.hooks.beforeLimitWrite != nil {
			d.hooks.beforeLimitWrite()
		}
		acl := d.currentACL()
		ops := []any{&zk.CheckVersionRequest{Path: parent + "/" + q[0].name, Version: -1}}
		for _, r := range rs {
			ops = append(ops, &zk.DeleteRequest{Path: parent + "/" + r.name, Version: -1})
		}
		ops = append(ops, &zk.CreateRequest{Path: parent + "/" + recordName(limit), Acl: acl.containers, Flags: zk.FlagSequence})
		res, err := call(ctx, d, func() ([]zk.MultiResponse, error) { return d.conn.Multi(ops...) })
		switch {
		case err == nil && len(res) == len(ops):
			r, ok := parseRecord(path.Base(res[len(res)-1].String))
			if !ok {
				return fmt.Errorf("setlimit: unexpected record name %q", res[len(res)-1].String)
			}
			d.followRecord(parent, r)
			return nil
		case err == nil:
			return fmt.Errorf("setlimit: unexpected reply to a record multi-operation: %d results", len(res))
		case d.fallBack(acl, err):
			continue
		case errors.Is(err, zk.ErrNoNode):
			continue // the first node, or a record, went meanwhile: look again
		}
		return fmt.Errorf("setlimit %s: %w", parent, classify(denied(err, parent, "CREATE")))
	}
}

// followRecord deletes the record r of parent once it rules no more: it
// watches each lock node older than r in turn until all are gone. It gives
// up, leaving r to the next Locker that lists the key, when the Locker
// closes, its session ends, a watch fails, or r goes first. One goroutine
// follows a record.
func (d *zkDriver) followRecord(parent string, r record) {
	p := parent + "/" + r.name
	if !d.mark(&d.following, p) {
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer d.unmark(&d.following, p)
		if d.outlive(parent, r) {
			_ = call0(d.ctx, d, func() error { return d.conn.Delete(p, -1) })
		}
	}()
}

// outlive waits until no lock node of parent is older than r, and reports
// whether r should be deleted then: false when it gave up (see
// followRecord).
func (d *zkDriver) outlive(parent string, r record) bool {
	p := parent + "/" + r.name
	gone, err := call(d.ctx, d, func() (<-chan zk.Event, error) {
		ok, _, ev, err := d.conn.ExistsW(p)
		if err == nil && !ok {
			err = zk.ErrNoNode
		}
		return ev, err
	})
	if err != nil {
		return false
	}
	children, _, err := d.children(d.ctx, parent)
	if err != nil {
		return false
	}
	for _, sh := range queueOf(children) {
		if sh.seq > r.seq {
			break
		}
		if !d.awaitDeletion(parent+"/"+sh.name, gone) {
			return false
		}
	}
	return true
}

// awaitDeletion waits until node p is gone, and reports false when it gave
// up: when gone (the record's watch) fires, the Locker closes, or the
// watch fails.
func (d *zkDriver) awaitDeletion(p string, gone <-chan zk.Event) bool {
	for {
		ev, err := call(d.ctx, d, func() (<-chan zk.Event, error) {
			_, _, ev, err := d.conn.GetW(p)
			return ev, err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return true
		case err != nil:
			return false
		}
		select {
		case e := <-ev:
			if e.Err != nil {
				return false
			}
			if e.Type == zk.EventNodeDeleted {
				return true
			}
			// Its data changed: watch it again.
		case <-gone:
			return false
		case <-d.stop:
			return false
		}
	}
}
