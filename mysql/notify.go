package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	sqldriver "database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/golocker/locker"
)

// Wake-ups through named locks.
//
// The table is the only source of truth; named locks (GET_LOCK) only tell
// waiters when to look at it again. While a driver holds rows, one connection
// of its own (taken from db's pool) holds the named lock of each of those keys
// (a session may hold many). A waiter's subscription blocks in GET_LOCK on
// another connection; when the holder's driver releases the named lock, right
// after the release UPDATE, the waiter gets it, gives it back at once and
// signals the engine, which runs TryAcquire.
//
// Every way this can go wrong costs latency, never exclusion:
//   - a spurious wake-up (the holder crashed: its session ended and freed the
//     name) makes the engine try the table, which answers Held(remaining);
//   - a missed one (the holder has not taken the name yet, or its connection
//     broke) is covered because a subscription that finds the name free
//     signals at a backoff (5 ms doubling to 500 ms, the polling floor) and
//     the engine never waits past the holder's remaining lock_until;
//   - a name held by a session that is no holder (names are predictable and
//     GET_LOCK needs no privilege: any account can take one) costs a waiter
//     no more than polling would: each GET_LOCK waits at most the Locker's
//     next backoff step (locker.WithBackoff) and signals when it times out,
//     so the waiter tries the table at the pace a polling waiter would.
//     MariaDB (10.1.2+) takes fractional timeouts; MySQL rounds them to
//     whole seconds, so there a wait is at least waitSeconds.
//
// Resources are bounded: one connection per Locker for all the names it
// holds, returned to the pool after 10 s without any, and at most
// maxWaitConns connections blocked in GET_LOCK per Locker (a quarter of the
// pool's MaxOpenConns when that is set); further waiters poll.
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
	// (the shortest on a server without fractional timeouts): it blocks
	// that long at most, then signals and checks again.
	waitSeconds = 1
	// connRetryMin is the first delay before the holder goroutine asks the
	// pool for a connection again.
	connRetryMin = locker.DefaultBackoffMin
	// grace is how long a subscription waits after a wake-up before
	// blocking again, so that a successful acquisition cancels it between
	// statements rather than in one (which costs the connection).
	grace = 10 * time.Millisecond
	// maxWaitConns bounds the connections blocked in GET_LOCK per Locker.
	maxWaitConns = 16
	// holderIdle is how long the holder's connection stays out of the pool
	// without any named lock.
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
	fractional bool
	backoff    func(attempt int) time.Duration // the Locker's
	freePoll   func(attempt int) time.Duration // locker.DefaultBackoff
	logger     *slog.Logger
	slots      chan struct{} // connections blocked in GET_LOCK

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	poke   chan struct{}

	mu     sync.Mutex
	closed bool
	want   map[string]*wanted                    // by name: the locks this driver holds
	subs   map[string]map[*subscription]struct{} // by store key
	wakeAt time.Time                             // when the holder goroutine wakes up next; zero while it works
}

// wanted is a lock this driver holds, whose name the holder goroutine takes.
type wanted struct {
	owner string
	since time.Time // acquired
	seen  time.Time // last acquired or renewed
	taken bool      // mirror of the holder goroutine's state, for released
}

func newNotifier(db *sql.DB, srv server, table string, ttl, readTimeout time.Duration, backoff func(int) time.Duration, logger *slog.Logger) *notifier {
	slots := maxWaitConns
	if m := db.Stats().MaxOpenConnections; m > 0 {
		slots = min(slots, m/4)
	}
	if backoff == nil {
		backoff = locker.DefaultBackoff()
	}
	n := &notifier{
		db:   db,
		salt: srv.database + "\x00" + table + "\x00",
		ttl:  ttl,
		// A blocked GET_LOCK must answer well within the read timeout.
		blocking:   readTimeout == 0 || readTimeout >= waitSeconds*time.Second+time.Second,
		fractional: srv.mariaDB,
		backoff:    backoff,
		freePoll:   locker.DefaultBackoff(),
		logger:     logger,
		slots:      make(chan struct{}, max(slots, 1)),
		poke:       make(chan struct{}, 1),
		want:       make(map[string]*wanted),
		subs:       make(map[string]map[*subscription]struct{}),
		wakeAt:     farAway(),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(1)
	go n.holder()
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

// acquired records that owner took key.
func (n *notifier) acquired(key, owner string) {
	name, now := n.name(key), time.Now()
	n.mu.Lock()
	w := n.want[name]
	if w == nil {
		w = &wanted{}
		n.want[name] = w
	}
	w.owner, w.since, w.seen = owner, now, now
	// Poke unless the holder goroutine already plans to wake up in time;
	// while it works (zero wakeAt) it may have missed this entry.
	poke := n.wakeAt.IsZero() || n.wakeAt.After(now.Add(takeDelay))
	n.mu.Unlock()
	if poke {
		n.wake()
	}
}

// renewed records a successful renewal.
func (n *notifier) renewed(key, owner string) {
	name := n.name(key)
	n.mu.Lock()
	if w := n.want[name]; w != nil && w.owner == owner {
		w.seen = time.Now()
	}
	n.mu.Unlock()
}

// released records that owner is done with key.
func (n *notifier) released(key, owner string) {
	name := n.name(key)
	n.mu.Lock()
	w := n.want[name]
	if w == nil || w.owner != owner {
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
			if now.Sub(w.seen) > n.ttl {
				delete(n.want, name)
				continue
			}
			next = minTime(next, w.seen.Add(n.ttl))
			if h.held[name] {
				continue
			}
			due := w.since.Add(takeDelay)
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

// subscription is a waiter's subscription to the releases of one key. It
// does nothing until armed: the engine subscribes before every attempt of a
// waiting Lock, and most attempts succeed at once, so the named-lock wait
// starts only once TryAcquire found the key held.
type subscription struct {
	n       *notifier
	key     string
	ch      chan struct{}
	ctx     context.Context
	started bool          // guarded by n.mu
	done    chan struct{} // closed when the goroutine, if started, ended
}

// subscribe registers a subscription to the releases of key.
func (n *notifier) subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	sctx, cancel := context.WithCancel(n.ctx)
	stop := context.AfterFunc(ctx, cancel)
	s := &subscription{n: n, key: key, ch: make(chan struct{}), ctx: sctx, done: make(chan struct{})}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		stop()
		cancel()
		return nil, nil, errors.New("driver closed")
	}
	set := n.subs[key]
	if set == nil {
		set = map[*subscription]struct{}{}
		n.subs[key] = set
	}
	set[s] = struct{}{}
	n.mu.Unlock()
	return s.ch, func() {
		stop()
		cancel()
		n.mu.Lock()
		delete(set, s)
		if len(n.subs[key]) == 0 {
			delete(n.subs, key)
		}
		started := s.started
		n.mu.Unlock()
		if started {
			<-s.done
		}
	}, nil
}

// contended arms the subscriptions to key: TryAcquire found it held.
func (n *notifier) contended(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	for s := range n.subs[key] {
		if s.started || s.ctx.Err() != nil {
			continue
		}
		s.started = true
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer close(s.done)
			n.watch(s.ctx, n.name(s.key), s.ch)
		}()
	}
}

// watch feeds ch until ctx ends: after each release of the name, and at a
// backoff while the name is free (nobody would announce a release) or no
// connection can block for it.
func (n *notifier) watch(ctx context.Context, name string, ch chan<- struct{}) {
	var conn *sql.Conn
	if n.blocking {
		select {
		case n.slots <- struct{}{}:
			defer func() { <-n.slots }()
			c, err := n.db.Conn(ctx)
			if err == nil {
				conn = c
				defer func() {
					if conn != nil {
						_ = conn.Close()
					}
				}()
			}
		default:
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sleep := func(d time.Duration) bool {
		timer.Reset(d)
		select {
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	deliver := func() bool {
		select {
		case ch <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// attempt counts the GET_LOCK waits that timed out: each waits the
	// Locker's next backoff step, as a polling wait would.
	attempt := 0
	// free counts the answers in a row that found the name free. The
	// first after a Held answer or a release means the holder released
	// already (or has not taken the name yet): try at once.
	free := 0
	for {
		if ctx.Err() != nil {
			return
		}
		if conn != nil {
			wait := n.waitTimeout(n.backoff(attempt))
			began := time.Now()
			var r sql.NullInt64
			err := conn.QueryRowContext(ctx, waitSQL(name, wait)).Scan(&r)
			if ctx.Err() != nil {
				return
			}
			switch {
			case err != nil || !r.Valid || r.Int64 < -1 || r.Int64 > 1:
				n.logger.Debug("locker: mysql: wake-up wait failed; polling", "err", err)
				discard(conn)
				_ = conn.Close()
				conn = nil
			case r.Int64 == 1: // released by its holder
				if !deliver() || !sleep(grace) {
					return
				}
				free = 0
				continue
			case r.Int64 == 0:
				// Still held after the wait: by the holder of a long
				// section, or by a session that is no holder at all
				// (the names are predictable, and GET_LOCK needs no
				// privilege). Either way the table decides: a wake-up
				// now, after at most the backoff step, makes such a
				// session cost no more than polling would, instead of
				// the holder's whole TTL. A server that rounded the
				// timeout down answered early: wait out the step.
				attempt++
				if rest := wait - time.Since(began); rest > 0 && !sleep(rest) {
					return
				}
				if !deliver() {
					return
				}
				// Held until now: found free next, it was released.
				free = 0
				continue
			}
			// -1: the name is free; poll below.
		}
		if free > 0 {
			// Free again: nobody will announce a release (the holder
			// may not have taken the name yet). Poll at the Locker's
			// backoff, never slower than the default one.
			step := min(n.backoff(free-1), n.freePoll(free-1))
			if !sleep(jitter(step)) {
				return
			}
		}
		free++
		if !deliver() {
			return
		}
	}
}

// waitTimeout is how long a waiter's GET_LOCK blocks before it signals
// anyway: the Locker's backoff step, at most waitSeconds. A server without
// fractional timeouts (MySQL) blocks waitSeconds.
func (n *notifier) waitTimeout(step time.Duration) time.Duration {
	if !n.fractional {
		return waitSeconds * time.Second
	}
	return min(max(step, time.Millisecond), waitSeconds*time.Second)
}

// waitSQL is the statement of a waiter: -1 when the name is free (nobody
// would announce a release), 1 when it was released within wait (and taken
// and given back at once), 0 when it was still held after wait.
func waitSQL(name string, wait time.Duration) string {
	return fmt.Sprintf("SELECT CASE WHEN IS_FREE_LOCK('%[1]s') = 1 THEN -1 WHEN GET_LOCK('%[1]s', %.3[2]f) = 1 THEN RELEASE_LOCK('%[1]s') ELSE 0 END",
		name, wait.Seconds())
}

// jitter returns a duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// close stops every goroutine and waits for them.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
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
