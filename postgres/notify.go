package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/golocker/locker/driver"
)

// selfTestTimeout bounds the wait for the LISTEN connection's own test
// notification. A connection that does not hear it (PgBouncer in
// transaction pooling mode) is given up: waiters poll.
const selfTestTimeout = 2 * time.Second

// errDeaf is the error of Subscribe once the LISTEN connection failed its
// self-test.
var errDeaf = errors.New("LISTEN does not receive notifications on this connection (PgBouncer in transaction mode?); set Config.PollOnly")

// errNotHeard is the self-test's error when its notification does not
// arrive.
var errNotHeard = errors.New("no test notification")

// listener is a Locker's one LISTEN connection, started by the first
// Subscribe. A notification on the table's channel carries a key whose row
// was freed; it wakes that key's waiters, who then try the row: it is a
// hint, never a grant. After every (re)connection it wakes every waiter,
// since notifications may have been missed meanwhile.
type listener struct {
	q       querier
	channel string
	backoff func(attempt int) time.Duration
	logger  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	started   bool
	listening bool
	err       error         // the last connection's failure, until one listens
	deaf      bool          // the self-test failed: never listening
	changed   chan struct{} // closed and replaced when listening or err change
	subs      map[string]map[chan struct{}]struct{}
}

func newListener(q querier, channel string, backoff func(int) time.Duration, logger *slog.Logger) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	return &listener{
		q: q, channel: channel, backoff: backoff, logger: logger,
		ctx: ctx, cancel: cancel,
		changed: make(chan struct{}),
		subs:    map[string]map[chan struct{}]struct{}{},
	}
}

// subscribe registers a waiter for key once the connection listens. It
// fails when the connection cannot listen (its last attempt failed, or it
// is deaf): the engine then polls.
func (l *listener) subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	l.mu.Lock()
	if !l.started {
		l.started = true
		l.wg.Add(1)
		go l.run()
	}
	for {
		switch {
		case l.deaf:
			l.mu.Unlock()
			return nil, nil, errDeaf
		case l.listening:
			ch := make(chan struct{}, 1)
			if l.subs[key] == nil {
				l.subs[key] = map[chan struct{}]struct{}{}
			}
			l.subs[key][ch] = struct{}{}
			l.mu.Unlock()
			var once sync.Once
			return ch, func() {
				once.Do(func() {
					l.mu.Lock()
					delete(l.subs[key], ch)
					if len(l.subs[key]) == 0 {
						delete(l.subs, key)
					}
					l.mu.Unlock()
				})
			}, nil
		case l.err != nil:
			err := l.err
			l.mu.Unlock()
			return nil, nil, fmt.Errorf("listen: %w", err)
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-l.ctx.Done():
			return nil, nil, errors.New("listen: driver closed")
		}
		l.mu.Lock()
	}
}

// set records the connection's state and tells waiting subscribers.
func (l *listener) set(listening bool, err error, deaf bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.listening, l.err, l.deaf = listening, err, l.deaf || deaf
	close(l.changed)
	l.changed = make(chan struct{})
}

// wake wakes the waiters of key, or every waiter for "".
func (l *listener) wake(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, subs := range l.subs {
		if key != "" && k != key {
			continue
		}
		for ch := range subs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// run keeps a connection listening until close, reconnecting with the
// Locker's backoff.
func (l *listener) run() {
	defer l.wg.Done()
	for attempt := 0; ; attempt++ {
		deaf := false
		err := l.q.listen(l.ctx, func(c *pgx.Conn) error {
			if _, err := c.Exec(l.ctx, "LISTEN "+quoteIdent(l.channel)); err != nil {
				return err
			}
			if err := l.selfTest(c); err != nil {
				deaf = errors.Is(err, errNotHeard)
				return err
			}
			l.set(true, nil, false)
			l.wake("") // anything freed while not listening
			attempt = 0
			for {
				n, err := c.WaitForNotification(l.ctx)
				if err != nil {
					return err
				}
				l.wake(n.Payload)
			}
		})
		if l.ctx.Err() != nil {
			return
		}
		l.set(false, err, deaf)
		l.wake("") // waiters poll while nobody listens
		if deaf {
			l.logger.Warn("locker: postgres: LISTEN hears no notifications; waiters poll (set Config.PollOnly to skip this test)",
				"channel", l.channel, "err", err)
			return
		}
		l.logger.Warn("locker: postgres: LISTEN connection lost; reconnecting", "channel", l.channel, "err", err)
		if !driver.Sleep(l.ctx, l.backoff(attempt)) {
			return
		}
	}
}

// selfTest sends a notification on the channel through the pool and waits
// for it on c: behind a transaction pooler, c's LISTEN does not stay with
// a server connection and nothing arrives. Other Lockers' notifications
// that arrive meanwhile count as well.
func (l *listener) selfTest(c *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(l.ctx, selfTestTimeout)
	defer cancel()
	if err := l.q.query(ctx, "SELECT pg_notify($1, '')::text", []any{l.channel}, func(func(...any) error) error { return nil }); err != nil {
		return fmt.Errorf("test notification: %w", err)
	}
	if _, err := c.WaitForNotification(ctx); err != nil {
		if l.ctx.Err() == nil && ctx.Err() != nil {
			return fmt.Errorf("%w within %v", errNotHeard, selfTestTimeout)
		}
		return err
	}
	return nil
}

// close stops the connection and waits for its goroutine.
func (l *listener) close() {
	l.cancel()
	l.wg.Wait()
}
