package mysql

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

// Wake-ups of shared holds.
//
// A shared hold (a permit, a read or a write hold) has its key's named lock
// taken by the holder goroutine, as a fast-path lock does (notify.go), and
// given up right after its release. A waiter for a shared hold subscribes
// (driver.Notifier): a goroutine lines up for the name on a session of its
// own while the name is held, and signals each time it gets the name, which
// it gives back at once, and each time its wait times out. The engine tries
// the table on each signal. The table stays the only source of truth.
//
// One session holds a name at a time: of a key's holders, the Locker that
// took it first wakes the waiters when its last hold of the key leaves.
// Any other change that may let a waiter in (any other release, a
// withdrawn place in line, a Break, SetLimit) interrupts the waits of the
// first in line instead, the only ones it may let in. Each wait's statement ends with a comment of
// tags, a hash of the owner of each hold of its driver that waits for the
// key. The driver that made the change reads the first waiters in line,
// lists the sessions of its account that run a wait on the name with one
// of their tags (information_schema.PROCESSLIST), and sends each a KILL
// QUERY (by query id on MariaDB, so that it ends nothing else). A waiter
// takes an interrupted wait as a wake-up. A release or a withdrawal interrupts in
// the background (the waker goroutine), SetLimit before it returns. A
// waiter this misses (another account's, or one between two waits) sees
// the change when its wait times out, at the pace of the Locker's backoff
// (a whole second on a server without fractional timeouts). A name that
// is free has no holder behind it: the waiter does not take it, which
// would keep the next holder from taking it, and looks again after a step
// (5 ms doubling to 500 ms), signalling each time.
//
// Subscribe serves only the keys a shared hold of this driver was refused
// on lately: a Lock waits in line (queue.go), and a locker.Watch or a
// LockMulti on a plain key polls as it did.

// Subscribe implements driver.Notifier for the waits of shared holds (see
// above). For any other key, and when the Locker has no session left, the
// channel is nil: the caller polls.
func (d notifyingDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	n := d.notify
	if !n.marked(n.shared, key) {
		return nil, func() {}, nil
	}
	s, err := n.session(ctx)
	if err != nil {
		return nil, nil, err
	}
	if s == nil {
		return nil, func() {}, nil
	}
	ch := make(chan struct{}, 1)
	rctx, cancel := context.WithCancel(n.ctx)
	// The notifier owns the goroutine: close waits for it, and the engine
	// calls close only after every subscription was cancelled.
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.ring(rctx, s, key, ch)
	}()
	return ch, cancel, nil
}

// sharedRefused records that owner's shared hold waits for key, so that
// Subscribe serves it, and its waits carry owner's tag.
func (d *sqlDriver) sharedRefused(key, owner string) {
	if d.notify == nil {
		return
	}
	n := d.notify
	n.mark(n.shared, key)
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.lined[key]
	if m == nil {
		if len(n.lined) >= maxHot {
			n.pruneLined(now)
		}
		m = make(map[string]time.Time)
		n.lined[key] = m
	}
	for t, at := range m {
		if now.Sub(at) > n.ttl {
			delete(m, t) // its place in line expired
		}
	}
	m[tag(owner)] = now
}

// unlined records that owner's shared hold no longer waits for key.
func (d *sqlDriver) unlined(key, owner string) {
	if d.notify == nil {
		return
	}
	n := d.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	if m := n.lined[key]; m != nil {
		delete(m, tag(owner))
		if len(m) == 0 {
			delete(n.lined, key)
		}
	}
}

// pruneLined forgets the waits not refused for a TTL: their places in
// line expired. n.mu is held.
func (n *notifier) pruneLined(now time.Time) {
	for k, m := range n.lined {
		for t, at := range m {
			if now.Sub(at) > n.ttl {
				delete(m, t)
			}
		}
		if len(m) == 0 {
			delete(n.lined, k)
		}
	}
}

// tag is the mark of owner in the statements of its waits: hex, so that
// it is safe in a comment and a literal.
func tag(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return "w" + hex.EncodeToString(sum[:8])
}

// note is the comment a wait for key's wake-up ends with: the tags of this
// driver's holds waiting for key, at most maxTags.
func (n *notifier) note(key string) string {
	now := time.Now()
	var b strings.Builder
	n.mu.Lock()
	for t, at := range n.lined[key] {
		if now.Sub(at) > n.ttl || b.Len() >= maxTags*18 {
			continue
		}
		b.WriteString(" " + t)
	}
	n.mu.Unlock()
	if b.Len() == 0 {
		return ""
	}
	return " /*" + b.String() + " */"
}

// maxTags bounds the tags in one wait's statement, and the heads a
// wake-up looks for.
const maxTags = 64

// ring lines up for key's name on s until ctx ends, and sends on ch (without
// blocking) each time it got the name or its wait timed out. It puts its
// session back before it returns.
func (n *notifier) ring(ctx context.Context, s *session, key string, ch chan<- struct{}) {
	name := n.name(key)
	signal := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	// timeouts counts the waits in a row that timed out; free the names
	// in a row got at once.
	timeouts, free := 0, 0
	for {
		if s == nil {
			// No session: tick at the pace of polling.
			if !driver.Sleep(ctx, driver.Jitter(n.backoff(timeouts))) {
				return
			}
			timeouts++
			signal()
			var err error
			if s, err = n.session(ctx); err != nil && ctx.Err() == nil {
				n.logger.Debug("locker: mysql: no connection to wait for a shared hold's wake-up; polling", "err", err)
			}
			continue
		}
		// A free name has no holder to wait for, and one taken here
		// would keep the holder from taking it.
		wasFree, got, err := s.lineUp(ctx, name, n.ringWait(timeouts), true, n.note(key))
		if ctx.Err() != nil {
			return // lineUp put s back
		}
		signal() // before the name goes back: that is one round trip
		pause := time.Duration(0)
		switch {
		case interrupted(err):
			s = nil // lineUp put it back
			timeouts, free = 0, 0
		case err != nil:
			s = nil // lineUp put it back, or dropped it
			pause = driver.Jitter(n.freePoll(timeouts))
			timeouts++
		case !got && wasFree:
			pause = driver.Jitter(n.freePoll(free))
			free++
		case !got:
			timeouts++
		default:
			n.endSession(s, name)
			s = nil
			timeouts, free = 0, 0
		}
		if pause > 0 && !driver.Sleep(ctx, pause) {
			if s != nil {
				n.putSession(s)
			}
			return
		}
		if s == nil {
			s, err = n.session(ctx)
			if err != nil && !errors.Is(err, context.Canceled) {
				n.logger.Debug("locker: mysql: no connection to wait for a shared hold's wake-up; polling", "err", err)
			}
		}
	}
}

// ringWait is how long a wait for a shared hold's wake-up blocks before it
// signals anyway: the Locker's backoff step with jitter, at most
// n.ringMax. A server without fractional timeouts (MySQL) blocks
// n.ringMax.
func (n *notifier) ringWait(attempt int) time.Duration {
	if !n.fractional {
		return n.ringMax
	}
	return min(max(driver.Jitter(n.backoff(attempt)), time.Millisecond), n.ringMax)
}

// interrupted reports whether err is that of a statement a KILL QUERY
// ended (ER_QUERY_INTERRUPTED).
func interrupted(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == 1317
}

// wakeLater has the waker goroutine wake key's waiters (wakeNow) soon.
func (n *notifier) wakeLater(key string) {
	n.mu.Lock()
	n.toWake[key] = struct{}{}
	n.mu.Unlock()
	select {
	case n.wakePoke <- struct{}{}:
	default:
	}
}

// waker is the goroutine that wakes the waiters of the keys of wakeLater,
// each once per round however often it was asked.
func (n *notifier) waker() {
	defer n.wg.Done()
	for {
		select {
		case <-n.wakePoke:
		case <-n.ctx.Done():
			return
		}
		n.mu.Lock()
		keys := make([]string, 0, len(n.toWake))
		for k := range n.toWake {
			keys = append(keys, k)
		}
		clear(n.toWake)
		n.mu.Unlock()
		for _, k := range keys {
			ctx, cancel := context.WithTimeout(n.ctx, stmtTimeout)
			n.wakeNow(ctx, k)
			cancel()
		}
	}
}

// wakeNow interrupts the waits for a wake-up of key's shared holds that
// this account's sessions run for the first waiters in line (see above).
// A failure costs the waiters latency only, so it is logged, not
// returned.
func (n *notifier) wakeNow(ctx context.Context, key string) {
	heads, err := n.heads(ctx, key)
	if err != nil {
		n.logger.Debug("locker: mysql: could not read a shared hold's line to wake it; its waits time out instead", "err", err)
		return
	}
	if len(heads) == 0 {
		return // nobody waits in line
	}
	var which strings.Builder
	for i, h := range heads {
		if i > 0 {
			which.WriteString(" OR ")
		}
		which.WriteString("LOCATE('" + tag(h) + "', INFO) > 0")
	}
	// The statement's text up to the wait's timeout. Names are hex made
	// by name(): the literal needs only its quotes doubled.
	start := fmt.Sprintf(ringSQL[:strings.LastIndex(ringSQL, "%.3")], n.name(key))
	// MariaDB kills by query id: a statement the session ran after
	// the wait (giving the name back) is spared.
	id, kill := "ID", "KILL QUERY %d"
	if n.fractional {
		id, kill = "QUERY_ID", "KILL QUERY ID %d"
	}
	rs, err := n.db.QueryContext(ctx, "SELECT "+id+" FROM information_schema.PROCESSLIST"+
		" WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID() AND LOCATE('"+strings.ReplaceAll(start, "'", "''")+"', INFO) = 1"+
		" AND ("+which.String()+")")
	if err != nil {
		n.logger.Debug("locker: mysql: could not list the waits for a shared hold's wake-up; they time out instead", "err", err)
		return
	}
	var ids []int64
	for rs.Next() {
		var id int64
		if err := rs.Scan(&id); err != nil {
			break
		}
		ids = append(ids, id)
	}
	err = errors.Join(rs.Err(), rs.Close())
	for _, id := range ids {
		if _, kerr := n.db.ExecContext(ctx, fmt.Sprintf(kill, id)); kerr != nil {
			var me *gomysql.MySQLError
			if errors.As(kerr, &me) && (me.Number == 1094 || me.Number == 1957) {
				continue // no such thread or query: it ended meanwhile
			}
			err = errors.Join(err, kerr)
		}
	}
	if err != nil {
		n.logger.Debug("locker: mysql: could not interrupt a wait for a shared hold's wake-up; it times out instead", "err", err)
	}
}

// lineHeads returns the owners of key's waiting shared holds that a change
// may let in: the first waiter, and the readers behind a first reader up
// to the first writer; at most maxTags.
func (d *sqlDriver) lineHeads(ctx context.Context, key string) ([]string, error) {
	st, err := d.sharedTable()
	if err != nil {
		return nil, err
	}
	q, err := d.sharedStmt(ctx, "SELECT owner_token, mode FROM "+st+
		" WHERE task_name = ? AND queued > 0 AND lock_until > "+dbNow+" ORDER BY queued LIMIT ?")
	if err != nil {
		return nil, err
	}
	rs, err := q.QueryContext(ctx, key, maxTags)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var heads []string
	for rs.Next() {
		var owner []byte
		var mode uint8
		if err := rs.Scan(&owner, &mode); err != nil {
			return nil, err
		}
		if len(heads) > 0 && driver.Mode(mode) != driver.Read {
			break
		}
		heads = append(heads, string(owner))
		if driver.Mode(mode) != driver.Read {
			break
		}
	}
	return heads, rs.Err()
}

// holdsName reports whether the named lock of key that this driver's
// holder goroutine holds is there for owner's hold alone: its release
// gives the name up and so wakes the key's waiters then.
func (n *notifier) holdsName(key, owner string) bool {
	name := n.name(key)
	n.mu.Lock()
	defer n.mu.Unlock()
	w := n.want[name]
	if w == nil || !w.taken || len(w.owners) != 1 {
		return false
	}
	_, ok := w.owners[owner]
	return ok
}

// changed wakes the waiters of key after a change that may let one of
// them in, made by owner's hold (or by no hold, owner ""), unless the
// release of owner's named lock does.
func (d *sqlDriver) changed(key, owner string) {
	if d.notify != nil && (owner == "" || !d.notify.holdsName(key, owner)) {
		d.notify.wakeLater(key)
	}
}
