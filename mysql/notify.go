package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	sqldriver "database/sql/driver"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/golocker/locker"
)

// Wake-ups through named locks.
//
// The table is the only source of truth; named locks (GET_LOCK) only order
// and wake the waiters. A Lock that took a contended key through the line
// of waiters (queue.go) holds the key's named lock on its own session until
// it releases the row. A lock taken by the fast path (one UPDATE) gets its
// name from the holder goroutine: one connection of the driver's own (taken
// from db's pool) holds the named lock of each of those keys (a session may
// hold many), from takeDelay after the acquisition. Either way the name is
// released right after the release UPDATE, and the first waiter blocked in
// GET_LOCK gets it and takes the row.
//
// Every way this can go wrong costs latency, never exclusion:
//   - a spurious wake-up (the holder crashed: its session ended and freed the
//     name) makes the waiter try the table, which answers Held(remaining);
//   - a missed one (the holder has not taken the name yet, or its connection
//     broke) is covered because a waiter that gets the name while the row is
//     held gives it back and lines up again after a step (5 ms doubling to
//     500 ms, the polling floor), never past the holder's lock_until;
//   - a name held by a session that is no holder (names are predictable and
//     GET_LOCK needs no privilege: any account can take one) costs a waiter
//     no more than a slow poll: while it waits in line, it checks the table
//     at the Locker's backoff, at least every minLineWait and at most every
//     waitSeconds, and takes a row free for idleFor. MariaDB (10.1.2+) takes
//     fractional timeouts; MySQL rounds them to whole seconds, so there a
//     check comes every waitSeconds.
//
// Resources are bounded: one connection per Locker for all the names of its
// fast-path locks, returned to the pool after 10 s without any, and at most
// maxSessions sessions per Locker for the waiters in line and the locks they
// took (a quarter of the pool's MaxOpenConns when that is set), returned to
// the pool after 10 s idle; further waiters poll.
const (
	// takeDelay is how long after an acquisition the holder takes its
	// named lock: a Lock+Unlock faster than that sends no named-lock
	// statement at all, so the uncontended path costs nothing extra.
	takeDelay = 5 * time.Millisecond
	// takeRetryMax bounds the backoff of a holder whose GET_LOCK(name, 0)
	// failed (a waiter held the name for a moment, or a previous holder's
	// session has not let it go yet).
	takeRetryMax = 500 * time.Millisecond
	// waitSeconds is the longest GET_LOCK timeout of a waiter, in seconds
	// (the only one on a server without fractional timeouts): it blocks
	// that long at most, then checks the table and lines up again.
	waitSeconds = 1
	// connRetryMin is the first delay before the holder goroutine asks the
	// pool for a connection again.
	connRetryMin = locker.DefaultBackoffMin
	// maxSessions bounds the sessions (connections waiting in line or
	// holding a name) per Locker.
	maxSessions = 16
	// holderIdle is how long the holder's connection, or an idle session,
	// stays out of the pool without any named lock.
	holderIdle = 10 * time.Second
	// lockBatch is the most names taken or released by one statement.
	lockBatch = 256
	// stmtTimeout bounds every statement of the holder's connection.
	stmtTimeout = 2 * time.Second
)

// notifier manages the named locks of one driver.
type notifier struct {
	db       *sql.DB
	salt     string        // database and table, hashed into names
	ttl      time.Duration // a name is dropped when its lock was not renewed for a TTL
	blocking bool          // waiters may block in GET_LOCK
	// fractional reports that GET_LOCK takes fractional timeouts
	// (MariaDB); MySQL rounds them to whole seconds.
	fractional  bool
	backoff     func(attempt int) time.Duration // the Locker's
	freePoll    func(attempt int) time.Duration // locker.DefaultBackoff
	logger      *slog.Logger
	maxSessions int
	releaseSQL  string // statements.releaseNamed
	// ringMax is the longest wait for a shared hold's wake-up
	// (waitSeconds; tests lengthen it).
	ringMax time.Duration
	// lineMax is the longest wait in line of a Lock: maxLineWait, less
	// within db's read timeout.
	lineMax time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	poke   chan struct{}

	mu     sync.Mutex
	closed bool
	want   map[string]*wanted   // by name: the fast-path locks this driver holds
	wakeAt time.Time            // when the holder goroutine wakes up next; zero while it works
	hot    map[string]time.Time // the keys a Lock found held lately (queue.go)
	shared map[string]time.Time // the keys a shared hold waits for lately (wake.go)
	toWake map[string]struct{}  // the keys whose waiters the waker wakes next (wake.go)
	// lined has, by key, the tags of the owners of this driver's shared
	// holds that wait in line, with the time of their last refusal
	// (wake.go).
	lined map[string]map[string]time.Time
	// heads returns the owners first in key's line of shared holds: those
	// a change may let in (wake.go).
	heads     func(ctx context.Context, key string) ([]string, error)
	wakePoke  chan struct{}
	sessions  map[*session]struct{} // every open session
	idle      []*session
	idleTimer *time.Timer
}

// wanted is a key this driver holds, whose name the holder goroutine
// takes: a plain lock's, or the shared holds' of the key (several in one
// driver), until the last of them leaves.
type wanted struct {
	owners map[string]time.Time // by owner: last acquired or renewed
	due    time.Time            // when the holder goroutine takes the name
	taken  bool                 // mirror of the holder goroutine's state, for released
}

func newNotifier(db *sql.DB, srv server, table string, ttl, readTimeout time.Duration, backoff func(int) time.Duration, logger *slog.Logger) *notifier {
	sessions := maxSessions
	if m := db.Stats().MaxOpenConnections; m > 0 {
		sessions = min(sessions, m/4)
	}
	if backoff == nil {
		backoff = locker.DefaultBackoff()
	}
	n := &notifier{
		db:   db,
		salt: srv.database + "\x00" + table + "\x00",
		ttl:  ttl,
		// A blocked GET_LOCK must answer well within the read timeout.
		blocking:    readTimeout == 0 || readTimeout >= waitSeconds*time.Second+time.Second,
		fractional:  srv.mariaDB,
		backoff:     backoff,
		freePoll:    locker.DefaultBackoff(),
		logger:      logger,
		maxSessions: max(sessions, 1),
		poke:        make(chan struct{}, 1),
		ringMax:     waitSeconds * time.Second,
		lineMax:     maxLineWait,
		toWake:      make(map[string]struct{}),
		lined:       make(map[string]map[string]time.Time),
		wakePoke:    make(chan struct{}, 1),
		want:        make(map[string]*wanted),
		wakeAt:      farAway(),
		hot:         make(map[string]time.Time),
		shared:      make(map[string]time.Time),
		sessions:    make(map[*session]struct{}),
	}
	if readTimeout > 0 {
		// A blocked GET_LOCK must answer well within it.
		n.lineMax = min(n.lineMax, readTimeout-time.Second)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(2)
	go n.holder()
	go n.waker()
	return n
}

func farAway() time.Time { return time.Now().Add(24 * time.Hour) }

// LockName returns the name of the MySQL named lock (GET_LOCK) that wakes
// the waiters of store key key of the lock table table in database
// database: what a DBA sees in IS_USED_LOCK or the metadata_locks table.
func LockName(database, table, key string) string {
	return (&notifier{salt: database + "\x00" + table + "\x00"}).name(key)
}

// name returns the named lock of a store key: named locks are server-wide
// and at most 64 characters, so it hashes the database, table and key.
func (n *notifier) name(key string) string {
	sum := sha256.Sum256([]byte(n.salt + key))
	return "locker_" + hex.EncodeToString(sum[:20])
}

func (n *notifier) wake() {
	select {
	case n.poke <- struct{}{}:
	default:
	}
}

// acquired records that owner took key with a plain lock, the key's only
// holder: an earlier owner's lock is gone. The holder goroutine takes the
// name takeDelay later.
func (n *notifier) acquired(key, owner string) {
	n.wantName(key, owner, time.Now().Add(takeDelay), true)
}

// acquiredNow is acquired for a lock taken while waiters line up for its
// name: the holder goroutine takes it at once.
func (n *notifier) acquiredNow(key, owner string) {
	n.wantName(key, owner, time.Now(), true)
}

// acquiredShared records that owner took a shared hold of key, beside the
// other holds of this driver. The holder goroutine takes the name
// takeDelay later, or at once when contended: a waiter may be waiting for
// it.
func (n *notifier) acquiredShared(key, owner string, contended bool) {
	due := time.Now()
	if !contended {
		due = due.Add(takeDelay)
	}
	n.wantName(key, owner, due, false)
}

// wantName adds owner to the owners of key's name (replacing them when
// only), and has the holder goroutine take the name by due.
func (n *notifier) wantName(key, owner string, due time.Time, only bool) {
	name, now := n.name(key), time.Now()
	n.mu.Lock()
	w := n.want[name]
	if w == nil || only {
		if w == nil {
			w = &wanted{}
			n.want[name] = w
		}
		w.owners, w.due = make(map[string]time.Time, 1), due
	}
	w.owners[owner] = now
	w.due = minTime(w.due, due)
	// Poke unless the holder goroutine already plans to wake up in time;
	// while it works (zero wakeAt) it may have missed this entry.
	poke := n.wakeAt.IsZero() || n.wakeAt.After(due)
	n.mu.Unlock()
	if poke {
		n.wake()
	}
}

// renewed records a successful renewal.
func (n *notifier) renewed(key, owner string) {
	name := n.name(key)
	n.mu.Lock()
	if w := n.want[name]; w != nil {
		if _, ok := w.owners[owner]; ok {
			w.owners[owner] = time.Now()
		}
	}
	n.mu.Unlock()
}

// released records that owner is done with key. The name goes when no
// other owner of this driver holds key.
func (n *notifier) released(key, owner string) {
	name := n.name(key)
	n.mu.Lock()
	w := n.want[name]
	if w == nil {
		n.mu.Unlock()
		return
	}
	delete(w.owners, owner)
	if len(w.owners) > 0 {
		n.mu.Unlock()
		return
	}
	delete(n.want, name)
	taken := w.taken
	n.mu.Unlock()
	if taken {
		n.wake()
	}
}

// holder is the goroutine that takes and releases the names of the locks
// this driver holds, on one connection.
func (n *notifier) holder() {
	defer n.wg.Done()
	h := holderConn{n: n, held: map[string]bool{}, retry: map[string]retry{}}
	defer h.drop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		next := farAway()
		var release, take []string
		n.mu.Lock()
		for name, w := range n.want {
			// The engine renews every TTL/3 and declares a lock lost
			// well before a TTL without renewal; it does not tell the
			// driver, so such a lock is forgotten here.
			for owner, seen := range w.owners {
				if now.Sub(seen) > n.ttl {
					delete(w.owners, owner)
				} else {
					next = minTime(next, seen.Add(n.ttl))
				}
			}
			if len(w.owners) == 0 {
				delete(n.want, name)
				continue
			}
			if h.held[name] {
				continue
			}
			due := w.due
			if r, ok := h.retry[name]; ok && r.at.After(due) {
				due = r.at
			}
			if due.After(now) || h.connRetry.After(now) {
				next = minTime(next, maxTime(due, h.connRetry))
				continue
			}
			take = append(take, name)
		}
		for name := range h.held {
			if _, ok := n.want[name]; !ok {
				release = append(release, name)
			}
		}
		for name := range h.retry {
			if _, ok := n.want[name]; !ok {
				delete(h.retry, name)
			}
		}
		idle := len(n.want) == 0 && len(h.held) == 0
		// Until it sleeps again, every acquisition pokes this goroutine:
		// it may have missed the snapshot above.
		n.wakeAt = time.Time{}
		n.mu.Unlock()

		acted := false
		if len(release) > 0 {
			h.release(release)
			acted = true
		}
		if len(take) > 0 {
			h.take(take)
			acted = true
		}
		if acted {
			n.setTaken(h.held)
			continue
		}
		if h.conn != nil && idle {
			if h.idleSince.IsZero() {
				h.idleSince = now
			}
			if now.Sub(h.idleSince) >= holderIdle {
				h.drop()
			} else {
				next = minTime(next, h.idleSince.Add(holderIdle))
			}
		} else {
			h.idleSince = time.Time{}
		}

		n.mu.Lock()
		n.wakeAt = next
		n.mu.Unlock()
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-n.poke:
		case <-n.ctx.Done():
			return
		}
	}
}

// setTaken mirrors the held names into the wanted entries.
func (n *notifier) setTaken(held map[string]bool) {
	n.mu.Lock()
	for name, w := range n.want {
		w.taken = held[name]
	}
	n.mu.Unlock()
}

// retry is when the holder tries a name again.
type retry struct {
	at    time.Time
	delay time.Duration
}

// holderConn is the holder goroutine's connection and the names it holds.
type holderConn struct {
	n         *notifier
	conn      *sql.Conn
	held      map[string]bool
	retry     map[string]retry
	connRetry time.Time     // no connection before then
	connDelay time.Duration // backoff of getting a connection
	idleSince time.Time
}

// get returns the connection, taking one from the pool if needed.
func (h *holderConn) get() *sql.Conn {
	if h.conn != nil {
		return h.conn
	}
	ctx, cancel := context.WithTimeout(h.n.ctx, stmtTimeout)
	defer cancel()
	c, err := h.n.db.Conn(ctx)
	if err != nil {
		h.connDelay = min(max(2*h.connDelay, connRetryMin), time.Second)
		h.connRetry = time.Now().Add(h.connDelay)
		h.n.logger.Debug("locker: mysql: no connection for wake-ups; waiters poll meanwhile", "err", err)
		return nil
	}
	h.conn, h.connDelay, h.connRetry = c, 0, time.Time{}
	return c
}

// drop gives the connection back: to the pool when it holds no name,
// otherwise it is discarded, so that its session ends and the server frees
// its names.
func (h *holderConn) drop() {
	if h.conn == nil {
		return
	}
	if len(h.held) > 0 {
		discard(h.conn)
	}
	_ = h.conn.Close()
	h.conn, h.held, h.idleSince = nil, map[string]bool{}, time.Time{}
}

// discard makes database/sql close c's driver connection instead of pooling
// it.
func discard(c *sql.Conn) {
	_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
}

// lockCalls renders "SELECT f('a'...), f('b'...)". Names are hex made by
// name(), safe to inline; no placeholders means one round trip on the text
// protocol.
func lockCalls(f string, names []string, extra string) string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, name := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(f + "('" + name + "'" + extra + ")")
	}
	return b.String()
}

// batch runs f(names) in a statement per lockBatch names and returns the
// results in order.
func (h *holderConn) batch(f, extra string, names []string) ([]sql.NullInt64, error) {
	c := h.get()
	if c == nil {
		return nil, errors.New("no connection")
	}
	out := make([]sql.NullInt64, 0, len(names))
	for len(names) > 0 {
		part := names[:min(len(names), lockBatch)]
		names = names[len(part):]
		res := make([]sql.NullInt64, len(part))
		ptrs := make([]any, len(part))
		for i := range res {
			ptrs[i] = &res[i]
		}
		ctx, cancel := context.WithTimeout(h.n.ctx, stmtTimeout)
		err := c.QueryRowContext(ctx, lockCalls(f, part, extra)).Scan(ptrs...)
		cancel()
		if err != nil {
			h.n.logger.Debug("locker: mysql: named-lock statement failed; dropping its connection", "err", err)
			h.drop()
			return nil, err
		}
		out = append(out, res...)
	}
	return out, nil
}

// take tries GET_LOCK(name, 0) for names; a name another session holds is
// retried with backoff.
func (h *holderConn) take(names []string) {
	res, err := h.batch("GET_LOCK", ", 0", names)
	for i, name := range names {
		if err == nil && res[i].Valid && res[i].Int64 == 1 {
			h.held[name] = true
			delete(h.retry, name)
			continue
		}
		r := h.retry[name]
		r.delay = min(max(2*r.delay, time.Millisecond), takeRetryMax)
		r.at = time.Now().Add(r.delay)
		h.retry[name] = r
	}
}

// release gives names up.
func (h *holderConn) release(names []string) {
	if _, err := h.batch("RELEASE_LOCK", "", names); err != nil {
		return // drop() discarded the connection: the server freed them
	}
	for _, name := range names {
		delete(h.held, name)
	}
}

// close stops every goroutine and waits for them.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	if n.idleTimer != nil {
		n.idleTimer.Stop()
	}
	idle := make(map[*session]bool, len(n.idle))
	for _, s := range n.idle {
		idle[s] = true
	}
	n.idle = nil
	open := make([]*session, 0, len(n.sessions))
	for s := range n.sessions {
		open = append(open, s)
	}
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	// No call runs any more: a session still open is idle, or holds the
	// name of a lock whose release failed; ending that one frees the name.
	for _, s := range open {
		n.dropSession(s, !idle[s])
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
