package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/driver"
)

// The line of waiters.
//
// A waiting Lock on a key that is contended lines up for the key's named
// lock (GET_LOCK) on a connection of its own, a session, and keeps that
// name from the moment it gets it until it releases the row: the server
// queues the sessions blocked in GET_LOCK in arrival order and grants the
// name to the first of them when its holder lets it go, so a release wakes
// exactly the next waiter, which takes the row with one UPDATE. Nobody
// barges: a releasing Locker that locks the key again lines up behind the
// others. The table stays the only source of truth; the name only orders
// the waiters. A waiter keeps its place while a goroutine beside its wait
// checks the table at the pace of polling, and takes a row that has been
// free for idleFor: a holder that crashed with its session alive, or a
// session that holds the name without the key, wakes nobody. Its wait
// ends after maxLineWait, and it lines up again at the end.
//
// A key is contended for a Locker from the moment one of its Lock calls
// found it held until hotFor after its last queued acquisition. Other keys
// take the fast path, the acquiring UPDATE alone, whose holder takes the
// name a little later through the notifier's holder connection (notify.go),
// and releases it right after the row.
const (
	// hotFor is how long after its last contended acquisition a key is
	// acquired through the line rather than by the fast path.
	hotFor = time.Second
	// maxHot bounds the contended keys remembered before expired ones are
	// forgotten.
	maxHot = 4096
	// minLineWait is the shortest pause between two checks of the table
	// by a waiter in line, the default backoff's longest step: a session
	// holding the name without the row delays a hand-off as much as
	// polling at that step.
	minLineWait = 500 * time.Millisecond
	// killEvery is how often a cancelled wait's statement is killed again
	// until it returns (a KILL QUERY that arrived before the statement
	// started has no effect).
	killEvery = 50 * time.Millisecond
	// killFor bounds how long a cancelled wait's statement is killed:
	// then its connection is closed (a KILL QUERY the server refused).
	killFor = stmtTimeout
	// idleFor is how long a row has been free at least when a check of a
	// waiter in line takes it: a release wakes the first waiter in line
	// much sooner, and a check must not take the row from it.
	idleFor = minLineWait
	// maxLineWait is the longest GET_LOCK wait of a Lock in line, which
	// keeps its place while the table is checked beside it: a wait that
	// times out lines up again at the end. A session cut off from its
	// client stays in the server's line that long at most.
	maxLineWait = 10 * time.Second
)

// session is a connection on which one waiter lines up for a key's named
// lock and, once it took the row, holds that name until the row's release.
type session struct {
	n         *notifier
	conn      *sql.Conn
	id        int64 // CONNECTION_ID(), for KILL QUERY
	idleSince time.Time
	release   *sql.Stmt // releaseSQL, prepared on conn at its first use
}

// heldName is the named lock a queued acquisition holds on its session
// until the row is released, once.
type heldName struct {
	once sync.Once
	s    *session
	name string
}

// end gives the name up and the session back, once. It runs after the row
// was released (or lost), so that the next waiter finds it free.
func (h *heldName) end() {
	h.once.Do(func() { h.s.n.endSession(h.s, h.name) })
}

// releaseRow releases the row of st and the name in one statement on the
// session, once; done is false when h is nil or was ended already (the
// caller then releases the row itself).
func (h *heldName) releaseRow(ctx context.Context, st lockState) (res sql.Result, done bool, err error) {
	if h == nil {
		return nil, false, nil
	}
	h.once.Do(func() {
		done = true
		res, err = h.s.n.releaseWithName(ctx, h.s, h.name, st)
	})
	return res, done, err
}

// releaseWithName runs the release of st with the name's release on s,
// and makes s idle (or drops it).
func (n *notifier) releaseWithName(ctx context.Context, s *session, name string, st lockState) (sql.Result, error) {
	if s.release == nil {
		stmt, err := s.conn.PrepareContext(ctx, n.releaseSQL)
		if err != nil {
			n.endSession(s, name)
			return nil, fmt.Errorf("prepare: %w", err)
		}
		s.release = stmt
	}
	res, err := s.release.ExecContext(ctx, name, st.key, st.owner, st.version)
	switch {
	case err == nil:
		if k, err := res.RowsAffected(); err == nil && k == 1 {
			n.putSession(s) // the statement released the name
		} else {
			n.endSession(s, name) // not our row: the name is still held
		}
	case definite(err):
		// Rolled back, but the name may be released already: releasing
		// it again is harmless.
		n.endSession(s, name)
	default:
		n.dropSession(s, true)
	}
	return res, err
}

// isHot reports whether key was contended lately.
func (n *notifier) isHot(key string) bool { return n.marked(n.hot, key) }

// markHot records that key is contended.
func (n *notifier) markHot(key string) { n.mark(n.hot, key) }

// marked reports whether key was marked in m (n.hot, n.shared) within
// hotFor.
func (n *notifier) marked(m map[string]time.Time, key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	at, ok := m[key]
	return ok && time.Since(at) < hotFor
}

// mark marks key in m (n.hot, n.shared), and forgets the marks older than
// hotFor once m has maxHot.
func (n *notifier) mark(m map[string]time.Time, key string) {
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(m) >= maxHot {
		for k, at := range m {
			if now.Sub(at) >= hotFor {
				delete(m, k)
			}
		}
	}
	m[key] = now
}

// session returns a session from the idle ones or the pool; nil (and no
// error) when the Locker has as many as it may, or waiters cannot block.
func (n *notifier) session(ctx context.Context) (*session, error) {
	if !n.blocking {
		return nil, nil
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errors.New("driver closed")
	}
	if k := len(n.idle); k > 0 {
		s := n.idle[k-1]
		n.idle = n.idle[:k-1]
		n.mu.Unlock()
		return s, nil
	}
	if len(n.sessions) >= n.maxSessions {
		n.mu.Unlock()
		return nil, nil
	}
	s := &session{n: n}
	n.sessions[s] = struct{}{}
	n.mu.Unlock()
	c, err := n.db.Conn(ctx)
	if err == nil {
		if err = c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&s.id); err != nil {
			_ = c.Close()
		}
	}
	if err != nil {
		n.mu.Lock()
		delete(n.sessions, s)
		n.mu.Unlock()
		return nil, err
	}
	s.conn = c
	return s, nil
}

// putSession makes s idle; it goes back to the pool after holderIdle.
func (n *notifier) putSession(s *session) {
	s.idleSince = time.Now()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		n.dropSession(s, false)
		return
	}
	n.idle = append(n.idle, s)
	if n.idleTimer == nil {
		n.idleTimer = time.AfterFunc(holderIdle, n.trimIdle)
	}
	n.mu.Unlock()
}

// trimIdle gives the sessions idle for holderIdle back to the pool.
func (n *notifier) trimIdle() {
	now := time.Now()
	var drop []*session
	n.mu.Lock()
	keep := n.idle[:0]
	next := time.Duration(0)
	for _, s := range n.idle {
		if idle := now.Sub(s.idleSince); idle >= holderIdle {
			drop = append(drop, s)
		} else {
			keep = append(keep, s)
			next = max(next, holderIdle-idle)
		}
	}
	clear(n.idle[len(keep):])
	n.idle = keep
	n.idleTimer = nil
	if len(keep) > 0 && !n.closed {
		n.idleTimer = time.AfterFunc(next, n.trimIdle)
	}
	n.mu.Unlock()
	for _, s := range drop {
		n.dropSession(s, false)
	}
}

// dropSession closes s's connection: back to the pool when it holds no
// name, otherwise discarded, so that its session ends and the server frees
// the name.
func (n *notifier) dropSession(s *session, holdsName bool) {
	n.mu.Lock()
	delete(n.sessions, s)
	n.mu.Unlock()
	if holdsName {
		discard(s.conn)
	}
	if s.release != nil {
		_ = s.release.Close()
	}
	_ = s.conn.Close()
}

// endSession releases name on s and makes s idle; a session whose release
// failed is discarded.
func (n *notifier) endSession(s *session, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), stmtTimeout)
	defer cancel()
	if _, err := s.conn.ExecContext(ctx, "DO RELEASE_LOCK('"+name+"')"); err != nil {
		n.logger.Debug("locker: mysql: named-lock release failed; dropping its connection", "err", err)
		n.dropSession(s, true)
		return
	}
	n.putSession(s)
}

// lineSQL and ringSQL are lineUp's statement, without and with onlyHeld.
// Args (fmt): name, wait in seconds.
const (
	lineSQL = "SELECT IS_FREE_LOCK('%[1]s'), GET_LOCK('%[1]s', %.3[2]f)"
	ringSQL = "SELECT IS_FREE_LOCK('%[1]s'), IF(IS_FREE_LOCK('%[1]s'), 0, GET_LOCK('%[1]s', %.3[2]f))"
)

// lineUp waits in GET_LOCK for name for at most wait, and reports whether
// the name was free when it asked and whether this session got it. With
// onlyHeld, a name that is free is not taken. The statement ends with
// note, a comment or "". When ctx ends, the statement
// is killed (KILL QUERY), so that nothing stays in line in the server; a
// name got anyway is then given back.
func (s *session) lineUp(ctx context.Context, name string, wait time.Duration, onlyHeld bool, note string) (free, got bool, err error) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait+stmtTimeout)
	defer cancel()
	returned := make(chan struct{})
	killed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(killed)
		// A wait that the kills do not end is cut with its connection.
		defer cancel()
		until := time.Now().Add(killFor)
		for time.Now().Before(until) {
			kctx, kcancel := context.WithTimeout(qctx, stmtTimeout)
			_, err := s.n.db.ExecContext(kctx, fmt.Sprintf("KILL QUERY %d", s.id))
			kcancel()
			if err != nil {
				s.n.logger.Debug("locker: mysql: could not kill a cancelled named-lock wait", "err", err)
			}
			select {
			case <-returned:
				return
			case <-qctx.Done():
				return
			case <-time.After(killEvery):
			}
		}
	})
	var f, g sql.NullInt64
	q := lineSQL
	if onlyHeld {
		q = ringSQL
	}
	err = s.conn.QueryRowContext(qctx, fmt.Sprintf(q, name, wait.Seconds())+note).Scan(&f, &g)
	close(returned)
	if !stop() {
		<-killed
	}
	got = err == nil && g.Valid && g.Int64 == 1
	if ctx.Err() != nil {
		if got {
			s.n.endSession(s, name)
		} else {
			s.n.afterWait(s, err)
		}
		return false, false, ctx.Err()
	}
	if err != nil {
		s.n.afterWait(s, err)
		return false, false, err
	}
	return f.Valid && f.Int64 == 1, got, nil
}

// afterWait puts a session back after a wait that did not get the name:
// idle when the server answered (a killed statement answers with an
// error), dropped when the connection may be broken.
func (n *notifier) afterWait(s *session, err error) {
	var me *gomysql.MySQLError
	if err == nil || errors.As(err, &me) {
		n.putSession(s)
		return
	}
	n.dropSession(s, true)
}

// lineWait is how long a waiter in line waits before it checks the table
// (again): the Locker's backoff step with jitter, at least minLineWait, at
// most waitSeconds; waitSeconds on a server without fractional timeouts
// (MySQL).
func (n *notifier) lineWait(attempt int) time.Duration {
	if !n.fractional {
		return waitSeconds * time.Second
	}
	return min(max(driver.Jitter(n.backoff(attempt)), minLineWait), waitSeconds*time.Second)
}

// Acquire implements driver.Acquirer: a key not contended lately is taken
// by the fast path (TryAcquire); a contended one through the line of
// waiters (see above), or by polling when this Locker has no session left.
func (d notifyingDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	n := d.notify
	if !n.isHot(req.Key) {
		g, err := d.TryAcquire(ctx, req)
		if err == nil || !errors.Is(err, driver.ErrHeld) {
			return g, err
		}
		n.markHot(req.Key)
	}
	s, err := n.session(ctx)
	if ctx.Err() != nil {
		return driver.Grant{}, ctx.Err()
	}
	if s == nil {
		if err != nil {
			n.logger.Debug("locker: mysql: no connection to wait in line; polling", "err", err)
		}
		return d.poll(ctx, req)
	}
	return d.line(ctx, s, req)
}

// line waits in line on s for req.Key and takes the row when its turn
// comes. s is idle again or holds the name for the grant when it returns.
func (d notifyingDriver) line(ctx context.Context, s *session, req driver.Request) (driver.Grant, error) {
	n := d.notify
	name := n.name(req.Key)
	// timeouts counts the waits in line that timed out; free the times in
	// a row the name was got at once while a holder without it had the
	// row.
	timeouts, free := 0, 0
	for {
		t, err := d.waitTurn(ctx, s, req, name)
		switch {
		case t.checked && t.got && t.checkErr == nil:
			// The check took the row as the wait got the name: the
			// grant keeps it.
			n.markHot(req.Key)
			t.grant.Queued = true
			t.grant.State.(*lockState).name = &heldName{s: s, name: name}
			return t.grant, nil
		case t.checked && t.got:
			n.endSession(s, name)
			return driver.Grant{}, t.checkErr
		case t.checked:
			// waitTurn gave the session back.
			if t.checkErr == nil {
				n.markHot(req.Key)
				n.acquiredNow(req.Key, req.Owner)
			}
			t.grant.Queued = true
			return t.grant, t.checkErr
		case err != nil:
			return driver.Grant{}, err
		case !t.got:
			// The wait timed out: the name is held by the holder of a
			// long section or by a session that is no holder (the names
			// are predictable). The table decides; lining up again puts
			// this waiter at the end of the line.
			timeouts++
			g, err := d.TryAcquire(ctx, req)
			if err == nil || !errors.Is(err, driver.ErrHeld) {
				n.putSession(s)
				g.Queued = true
				return g, err
			}
			continue
		}
		// First in line, with the name: the row should be free.
		g, err := d.tryAcquire(ctx, req)
		err = classify(err)
		if err == nil {
			n.markHot(req.Key)
			g.Queued = !t.wasFree || timeouts > 0 || free > 0
			g.State.(*lockState).name = &heldName{s: s, name: name}
			return g, nil
		}
		n.endSession(s, name)
		if !errors.Is(err, driver.ErrHeld) {
			return driver.Grant{}, err
		}
		// Held by a holder without the name (one that took the fast
		// path, a TryLock, a crashed holder until lock_until): give the
		// name back so that its Locker can take it, and line up again
		// after a step, never slower than the default backoff, never
		// much past the holder's remaining time.
		step := driver.Backoff(func(a int) time.Duration { return min(n.backoff(a), n.freePoll(a)) })
		pause := step.Delay(free, driver.Remaining(err), false)
		free++
		if !driver.Sleep(ctx, pause) {
			return driver.Grant{}, ctx.Err()
		}
		if s, err = n.session(ctx); s == nil {
			if ctx.Err() != nil {
				return driver.Grant{}, ctx.Err()
			}
			return d.poll(ctx, req)
		}
	}
}

// turn is the outcome of waitTurn.
type turn struct {
	wasFree, got bool // the name was free when asked; the wait got it
	// checked reports that a check of the table took the row (grant) or
	// failed (checkErr).
	checked  bool
	grant    driver.Grant
	checkErr error
}

// waitTurn waits in line on s for name, lineMax at most, while a
// goroutine checks the table at the pace of lineWait: the wait keeps its
// place in the server's line through the checks, so that waiters are
// served in the order they lined up however long the holder holds the
// key. The checks find the key free when no release wakes the line: its
// holder crashed, or a session that is no holder has the name. A check
// that takes the row or fails ends the wait (KILL QUERY). When t.checked,
// s is idle again unless t.got; err is the wait's.
func (d notifyingDriver) waitTurn(ctx context.Context, s *session, req driver.Request, name string) (t turn, err error) {
	n := d.notify
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := 0; ; k++ {
			if !driver.Sleep(wctx, n.lineWait(k)) {
				return
			}
			// ctx, not wctx: a check is never cut by the end of the wait.
			g, err := d.tryIdle(ctx, req)
			if err = classify(err); err == nil || !errors.Is(err, driver.ErrHeld) {
				t.checked, t.grant, t.checkErr = true, g, err
				stop()
				return
			}
		}
	}()
	t.wasFree, t.got, err = s.lineUp(wctx, name, n.lineMax, false, "")
	stop()
	<-done
	if t.checked && err == nil && !t.got {
		n.putSession(s) // the wait timed out as a check took the row
	}
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return t, err
}

// poll waits by polling the table at the Locker's backoff, for a Lock that
// has no session to wait in line.
func (d notifyingDriver) poll(ctx context.Context, req driver.Request) (driver.Grant, error) {
	try := func(ctx context.Context) (driver.Grant, error) { return d.TryAcquire(ctx, req) }
	g, err := d.backoff.Poll(ctx, try, nil)
	g.Queued = true // an attempt before this wait found the key held
	return g, err
}
