package mysql

import (
	"context"
	"errors"
	"time"

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
// One session holds a name at a time: of a key's holders, the first to take
// it wakes the waiters when it leaves, and a release by another one reaches
// them when their wait times out, at the pace of the Locker's backoff (a
// whole second on a server without fractional timeouts). A name that is
// free has no holder behind it: the waiter does not take it, which would
// keep the next holder from taking it, and looks again after a step (5 ms
// doubling to 500 ms), signalling each time.
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
		n.ring(rctx, s, n.name(key), ch)
	}()
	return ch, cancel, nil
}

// sharedRefused records that a shared hold of this driver waits for key,
// so that Subscribe serves it.
func (d *sqlDriver) sharedRefused(key string) {
	if d.notify != nil {
		d.notify.mark(d.notify.shared, key)
	}
}

// ring lines up for name on s until ctx ends, and sends on ch (without
// blocking) each time it got the name or its wait timed out. It puts its
// session back before it returns.
func (n *notifier) ring(ctx context.Context, s *session, name string, ch chan<- struct{}) {
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
		wasFree, got, err := s.lineUp(ctx, name, n.ringWait(timeouts), true)
		if ctx.Err() != nil {
			return // lineUp put s back
		}
		signal() // before the name goes back: that is one round trip
		pause := time.Duration(0)
		switch {
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
// waitSeconds. A server without fractional timeouts (MySQL) blocks
// waitSeconds.
func (n *notifier) ringWait(attempt int) time.Duration {
	if !n.fractional {
		return waitSeconds * time.Second
	}
	return min(max(driver.Jitter(n.backoff(attempt)), time.Millisecond), waitSeconds*time.Second)
}
