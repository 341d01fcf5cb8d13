package redis

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

const (
	// healthInterval is how long the pub/sub connection may stay silent
	// before it is pinged; a ping unanswered for another interval makes the
	// notifier replace the connection (a peer that vanished without a reset
	// never makes a read fail).
	healthInterval = 5 * time.Second
	// writeTimeout bounds one SUBSCRIBE or UNSUBSCRIBE.
	writeTimeout = 5 * time.Second
	// maxBackoff bounds the pause between attempts on a failing connection.
	maxBackoff = time.Second
	// linger is how long a channel stays subscribed after its last waiter
	// left, so that a key contended in bursts does not cost a SUBSCRIBE, an
	// UNSUBSCRIBE and an extra attempt (on the confirmation) per wait.
	linger = 2 * time.Second
)

// errNotifierClosed is returned by register after close.
var errNotifierClosed = errors.New("redis: notifier closed")

// notifier tells the waiting Locks of one Locker about their keys: a
// hand-over to one of them ("grant <owner> …" on the key's channel for this
// Locker, channelName(key) + ":" + lid) wakes that waiter, which confirms it
// in Redis; the waiter next in line hears how long the claim lasts ("claim
// <ms>"); a release that found only waiters that count as gone wakes them
// ("free"). No other Locker hears of a hand-over, so its cost does not grow
// with the number of waiters. It keeps one pub/sub connection, opened on
// first need and shared by every waiter, with one SUBSCRIBE per key that
// has waiters.
//
// A Lock registers when its first attempt finds the key held (before it,
// when the channel is still subscribed from an earlier wait, lest a
// hand-over arrive before the registration), and held then asks for the
// subscription, so uncontended locks never touch pub/sub. A hand-over published between that attempt and the moment the
// subscription is active would be missed, so the subscription's confirmation
// from the server wakes the waiters too: they attempt once more, which
// finds a lock handed over to them, and from then on every message reaches
// them. The same holds after a reconnection: go-redis resubscribes, and the
// confirmations wake everybody. A channel stays subscribed for linger after
// its last waiter left.
//
// Two goroutines, started with the connection and stopped by close: the
// receiver reads the connection (messages, confirmations, health pings) and
// the writer sends SUBSCRIBE and UNSUBSCRIBE, so that they reach the server in
// the order the waiters' state changed, and callers never wait on the
// network.
type notifier struct {
	client Client
	lid    string       // the Locker's id: its channels end in ":" + lid
	logger *slog.Logger // set before first use (Configure)
	// refused is called (from the receiver) when the server refuses a
	// subscription; it calls disable.
	refused func(error)

	mu       sync.Mutex
	closed   bool
	disabled bool // the server refused pub/sub: no more subscriptions
	started  bool
	ps       *goredis.PubSub
	subs     map[string]*subscription // by store key
	byChan   map[string]*subscription // the issued ones, by channel
	dirty    map[string]struct{}      // store keys the writer must look at
	idle     map[string]struct{}      // store keys subscribed without waiters
	// lingering is set while the writer's timer is due for an idle
	// subscription: a waiter leaving then needs no writer pass (its
	// linger ends after the timer's, whose pass looks at every idle key).
	lingering bool

	poke     chan struct{} // wakes the writer
	stop     chan struct{} // closed by close or disable
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// waiter is one waiting Lock, as the notifier sees it.
type waiter struct {
	owner   string
	wake    chan struct{}      // the key may be free, or handed over to owner: try again
	claimed chan time.Duration // handed over to another waiter, for a claim window this long
	// wid, for a LockMulti that records itself with the keys it finds held
	// (watchField), names its records; freed collects the records that
	// releases consumed ("free <wid> <seq>"), guarded by the notifier's mu
	// (takeFreed).
	wid   string
	freed []freedRecord
	// reg is a Lock's registration (register): a LockMulti's waiter has
	// one per key in its caller's hands instead.
	reg registration
}

// freedRecord is a LockMulti's record that a release consumed: the store
// key and the number of the attempt that wrote it.
type freedRecord struct {
	key string
	seq uint64
}

// parseFree parses "free <wid> <seq>", the wake-up of the LockMulti wait
// wid whose record, written by its attempt seq, a release consumed.
func parseFree(payload string) (wid string, seq uint64, ok bool) {
	rest, ok := strings.CutPrefix(payload, "free ")
	if !ok {
		return "", 0, false
	}
	wid, num, ok := strings.Cut(rest, " ")
	if !ok {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(num, 10, 64)
	return wid, seq, err == nil && wid != ""
}

// grant is a hand-over announced on a lock's channel: "grant <owner> <seq>
// <token> <ttl>".
type grant struct {
	owner string
	seq   uint64        // the waiter's last attempt the server had seen
	token uint64        // the fencing token
	ttl   time.Duration // the claim window: the lock's time to live from the hand-over
}

// parseGrant parses a hand-over message.
func parseGrant(payload string) (grant, bool) {
	f := strings.Fields(payload)
	if len(f) != 5 || f[0] != "grant" {
		return grant{}, false
	}
	seq, err1 := strconv.ParseUint(f[2], 10, 64)
	token, err2 := strconv.ParseUint(f[3], 10, 64)
	ttl, err3 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return grant{}, false
	}
	return grant{owner: f[1], seq: seq, token: token, ttl: time.Duration(ttl) * time.Millisecond}, true
}

// parseClaim parses "claim <ms>", a hand-over to the waiter before ours in
// line, whose claim runs that long.
func parseClaim(payload string) (time.Duration, bool) {
	rest, ok := strings.CutPrefix(payload, "claim ")
	if !ok {
		return 0, false
	}
	ms, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || ms < 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// subscription is the state of one key's channel.
type subscription struct {
	key     string // the store key
	channel string // set when issued
	waiters map[*waiter]struct{}
	idle    time.Time // when the last waiter left (issued ones only)
	wanted  bool      // an attempt found the key held: subscribe
	issued  bool      // SUBSCRIBE handed to the current connection
}

func newNotifier(client Client, logger *slog.Logger, refused func(error), lid string) *notifier {
	return &notifier{
		client:  client,
		lid:     lid,
		logger:  logger,
		refused: refused,
		subs:    make(map[string]*subscription),
		byChan:  make(map[string]*subscription),
		dirty:   make(map[string]struct{}),
		idle:    make(map[string]struct{}),
		poke:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
}

// register registers a waiter of owner for store key. Its wake channel
// receives a value whenever the key may have become free or was handed over
// to owner, its claimed channel the claim window of a hand-over to another
// waiter; its registration's leave unregisters it. Neither blocks on the
// network.
//
// With early set, it registers only when the key's channel is subscribed
// already (a hand-over could then arrive before the caller's next step) and
// returns a nil waiter otherwise. Without it, when the channel is
// subscribed already, the caller may have missed a hand-over before
// registering, and the waiter starts woken. After disable it returns a nil
// waiter: the caller polls.
func (n *notifier) register(key, owner string, early bool) (*waiter, *registration, error) {
	if early && !n.subscribedOrClosed(key) {
		return nil, nil, nil // the common case of an uncontended Lock: no allocation
	}
	w := newWaiter(owner)
	ok, err := n.add(key, w, early, &w.reg)
	if !ok {
		return nil, nil, err
	}
	return w, &w.reg, nil
}

// subscribedOrClosed reports whether add may register an early waiter for
// key, or fail: the key's channel is subscribed, or n is closed.
func (n *notifier) subscribedOrClosed(key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed || (!n.disabled && n.subs[key] != nil)
}

func newWaiter(owner string) *waiter {
	return &waiter{owner: owner, wake: make(chan struct{}, 1), claimed: make(chan time.Duration, 1)}
}

// add registers w for store key in r, as register does for a new waiter;
// one waiter may wait for several keys, with a registration for each. It
// reports whether it registered w (not when early and no subscription, nor
// after disable); r.leave unregisters it then. r must be unused or left.
func (n *notifier) add(key string, w *waiter, early bool, r *registration) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false, errNotifierClosed
	}
	if n.disabled {
		return false, nil
	}
	s := n.subs[key]
	if s == nil && early {
		return false, nil
	}
	if s == nil {
		s = &subscription{key: key, waiters: make(map[*waiter]struct{}, 1)}
		n.subs[key] = s
	}
	if len(s.waiters) == 0 {
		s.idle = time.Time{}
		delete(n.idle, key)
	}
	if !early && s.issued {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	s.waiters[w] = struct{}{}
	*r = registration{n: n, key: key, s: s, w: w, on: true}
	return true, nil
}

// registration is one registration of a waiter for one key (add). It lives
// in its waiter or its caller's slice: a wait allocates nothing for it.
type registration struct {
	n   *notifier
	key string
	s   *subscription
	w   *waiter
	on  bool // registered and not left, guarded by n.mu
}

// leave unregisters r's waiter for r's key, once: a later call, or one on
// a registration add did not make, does nothing. It may be called from any
// goroutine that add's return reached.
func (r *registration) leave() {
	if r == nil || r.n == nil {
		return
	}
	n := r.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if !r.on {
		return
	}
	r.on = false
	n.leaveLocked(r.key, r.s, r.w)
}

// leaveLocked unregisters a waiter; the channel is unsubscribed (by the
// writer) once it has had no waiters for the linger time. n.mu must be
// held.
func (n *notifier) leaveLocked(key string, s *subscription, w *waiter) {
	delete(s.waiters, w)
	if len(s.waiters) > 0 {
		return
	}
	if !s.issued {
		n.dropLocked(key, s)
		delete(n.dirty, key)
		return
	}
	s.idle = time.Now()
	n.idle[key] = struct{}{}
	if !n.lingering {
		// Otherwise the writer's pass at its timer finds key: no wake-up
		// of the writer for each Lock of a contended key.
		n.lingering = true
		n.markLocked(key)
	}
}

// dropLocked forgets s, the subscription of key. n.mu must be held.
func (n *notifier) dropLocked(key string, s *subscription) {
	if n.subs[key] == s {
		delete(n.subs, key)
	}
	if s.channel != "" && n.byChan[s.channel] == s {
		delete(n.byChan, s.channel)
	}
	delete(n.idle, key)
}

// held is called when an attempt found key held: the waiters registered for
// it now need the subscription.
func (n *notifier) held(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[key]
	if n.closed || n.disabled || s == nil || len(s.waiters) == 0 || s.wanted {
		return
	}
	s.wanted = true
	if !n.started {
		n.started = true
		n.ps = n.client.Subscribe(context.Background())
		n.wg.Add(2)
		go n.receive()
		go n.write()
	}
	n.markLocked(key)
}

// markLocked queues key for the writer. n.mu must be held.
func (n *notifier) markLocked(key string) {
	n.dirty[key] = struct{}{}
	select {
	case n.poke <- struct{}{}:
	default:
	}
}

// deliver handles a message on channel: a hand-over wakes the waiter it
// names; a hand-over to another waiter, or a claim announced to the next
// waiter in line, tells the claim window; anything else (a wake-up of a
// waiter that counted as gone, a subscription confirmation) wakes every
// waiter of the key. A wake-up that names a LockMulti's record
// ("free <wid> <seq>") also tells that waiter that the record is gone.
func (n *notifier) deliver(channel, payload string) {
	g, isGrant := parseGrant(payload)
	if claim, ok := parseClaim(payload); ok {
		g, isGrant = grant{ttl: claim}, true // names no waiter of ours
	}
	wid, seq, isFree := parseFree(payload)
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.byChan[channel]
	if s == nil {
		return
	}
	for w := range s.waiters {
		if isFree && w.wid == wid {
			w.freed = append(w.freed, freedRecord{key: s.key, seq: seq})
		}
		switch {
		case !isGrant, w.owner == g.owner:
			// A hand-over to this waiter is a wake-up like any other:
			// nothing read from a channel is trusted, its next attempt
			// confirms the hand-over in Redis.
			select {
			case w.wake <- struct{}{}:
			default:
			}
		default:
			select {
			case w.claimed <- g.ttl:
			default:
			}
		}
	}
}

// takeFreed returns the records of w that releases consumed since the last
// call, and forgets them.
func (n *notifier) takeFreed(w *waiter) []freedRecord {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := w.freed
	w.freed = nil
	return f
}

// write is the writer goroutine: it turns the waiters' state into SUBSCRIBE
// and UNSUBSCRIBE commands, batched.
func (n *notifier) write() {
	defer n.wg.Done()
	failures := 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-n.poke:
		case <-timer.C:
		case <-n.stop:
			return
		}
		n.mu.Lock()
		ps := n.ps
		var sub, unsub []string
		for key := range n.dirty {
			s := n.subs[key]
			switch {
			case s == nil:
			case len(s.waiters) == 0 && !s.issued:
				n.dropLocked(key, s)
			case len(s.waiters) > 0 && s.wanted && !s.issued:
				s.issued = true
				if s.channel == "" {
					s.channel = channelName(key) + ":" + n.lid
				}
				n.byChan[s.channel] = s
				sub = append(sub, s.channel)
			}
		}
		clear(n.dirty)
		now := time.Now()
		next := time.Duration(-1) // no idle subscription: no timer
		for key := range n.idle {
			s := n.subs[key]
			if s == nil || len(s.waiters) > 0 {
				delete(n.idle, key)
				continue
			}
			if left := linger - now.Sub(s.idle); left > 0 {
				if next < 0 || left < next {
					next = left
				}
				continue
			}
			n.dropLocked(key, s)
			if s.issued {
				unsub = append(unsub, s.channel)
			}
		}
		n.lingering = next >= 0
		n.mu.Unlock()
		if next >= 0 {
			timer.Reset(next)
		}

		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		if len(unsub) > 0 {
			// A failure needs no retry: the connection it failed on is
			// replaced, and go-redis resubscribes only the channels it
			// still lists, which no longer include these.
			_ = ps.Unsubscribe(ctx, unsub...)
		}
		var err error
		if len(sub) > 0 {
			err = ps.Subscribe(ctx, sub...)
		}
		cancel()
		if err == nil {
			failures = 0
			continue
		}
		// The SUBSCRIBE may not have reached the server (go-redis
		// resubscribes after a reconnection only the channels it listed
		// before this call): send it again after a pause.
		failures++
		n.logger.Debug("locker: redis: subscribe failed, retrying", "err", err)
		n.mu.Lock()
		for key, s := range n.subs {
			if s.issued && n.ps == ps && slices.Contains(sub, s.channel) {
				s.issued = false
				n.dirty[key] = struct{}{}
			}
		}
		n.mu.Unlock()
		if !n.sleep(backoff(failures)) {
			return
		}
		select {
		case n.poke <- struct{}{}:
		default:
		}
	}
}

// receive is the receiver goroutine: it wakes waiters on release messages
// and on subscription confirmations, and watches the connection's health.
func (n *notifier) receive() {
	defer n.wg.Done()
	pinged := false
	failures := 0
	for {
		n.mu.Lock()
		ps := n.ps
		n.mu.Unlock()
		msg, err := ps.ReceiveTimeout(context.Background(), healthInterval)
		select {
		case <-n.stop:
			return
		default:
		}
		if err != nil {
			if refused(err) {
				// The server refuses SUBSCRIBE, or the channel:
				// nothing will ever arrive.
				n.refused(err)
				return
			}
			if isReadTimeout(err) {
				failures = 0
				if pinged {
					n.logger.Warn("locker: redis: pub/sub connection silent, replacing it")
					n.replace(ps)
					pinged = false
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
				_ = ps.Ping(ctx, "locker")
				cancel()
				pinged = true
				continue
			}
			// go-redis has dropped the connection; the next call dials
			// again and resubscribes.
			failures++
			pinged = false
			if failures == 1 {
				n.logger.Debug("locker: redis: pub/sub connection failed", "err", err)
			}
			if !n.sleep(backoff(failures)) {
				return
			}
			continue
		}
		failures = 0
		pinged = false
		switch m := msg.(type) {
		case *goredis.Message:
			n.deliver(m.Channel, m.Payload)
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				n.deliver(m.Channel, "")
			}
		}
	}
}

// replace swaps a silent pub/sub connection for a new one, on which the
// writer subscribes every channel again.
func (n *notifier) replace(old *goredis.PubSub) {
	n.mu.Lock()
	if n.closed || n.ps != old {
		n.mu.Unlock()
		return
	}
	n.ps = n.client.Subscribe(context.Background())
	for key, s := range n.subs {
		if s.issued {
			s.issued = false
			n.markLocked(key)
		}
	}
	n.mu.Unlock()
	_ = old.Close()
}

// isReadTimeout reports whether err is a read that timed out (no message
// within healthInterval), as opposed to a failed dial or a broken connection.
func isReadTimeout(err error) bool {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// backoff returns the pause after the given number of consecutive failures.
func backoff(failures int) time.Duration {
	d := 50 * time.Millisecond
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// sleep waits for d and reports false when the notifier was closed first.
func (n *notifier) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.stop:
		return false
	}
}

// disable stops the notifier for good once the server refused pub/sub:
// every waiter is woken (its next attempt finds a hand-over, and its Lock
// polls from then on), no subscription is made any more, and the connection
// is closed and the goroutines stopped (close waits for them).
func (n *notifier) disable() {
	n.mu.Lock()
	if n.closed || n.disabled {
		n.mu.Unlock()
		return
	}
	n.disabled = true
	for _, s := range n.subs {
		for w := range s.waiters {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
	started, ps := n.started, n.ps
	n.mu.Unlock()
	if started {
		n.stopOnce.Do(func() { close(n.stop) })
		_ = ps.Close()
	}
}

// close closes the pub/sub connection and waits for the goroutines, its
// own and those of spawn.
func (n *notifier) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	started, ps := n.started, n.ps
	n.mu.Unlock()
	n.stopOnce.Do(func() { close(n.stop) })
	if started {
		_ = ps.Close()
	}
	n.wg.Wait()
}

// spawn runs f in a goroutine that close waits for, and reports whether
// it did: after close it runs nothing. The channel f gets is closed when
// n stops (close, or disable once the connection was opened); f should
// return soon after, since close waits for it.
func (n *notifier) spawn(f func(stop <-chan struct{})) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f(n.stop)
	}()
	return true
}
