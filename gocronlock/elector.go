package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/golocker/locker"
)

// ErrNotLeader is returned by the Elector's IsLeader on a replica that does
// not lead.
var ErrNotLeader = errors.New("gocronlock: not the leader")

var _ gocron.Elector = (*Elector)(nil)

// firstOutcomeWait bounds how long IsLeader waits for the campaign's first
// outcome.
const firstOutcomeWait = 10 * time.Second

// Elector is a gocron.Elector backed by locker.Elect: the replica that
// holds its key leads. Its methods are safe for concurrent use.
//
// gocron's Scheduler.Shutdown does not stop an Elector: call Close after
// it, so that another replica takes over at once.
//
//	defer e.Close() // runs after Shutdown: resigns
//	defer s.Shutdown()
type Elector struct {
	l    locker.Locker
	key  string
	opts []locker.LockOption
	cfg  config

	stop    context.CancelFunc
	stopped <-chan struct{} // closed by Close
	done    chan struct{}   // closed when the campaign has returned

	decided chan struct{} // closed at the campaign's first outcome
	decide  sync.Once

	mu   sync.Mutex
	term context.Context // the current or last term's ctx; nil before the first
}

// NewElector starts campaigning for key through l at once, and goes on
// until Close or until l is closed. A term ends when its lock is lost
// (then the replica campaigns again) or at Close, which resigns.
//
// Prefix applies to key, MaxHold bounds a term, and Logger gets the errors
// that end the campaign. It returns an error matching
// locker.ErrInvalidOption for a nil Locker, a nil or bad Option, an option
// the Locker refuses, or MinHold (a leader that resigns must not keep the
// key).
func NewElector(l locker.Locker, key string, opts ...Option) (*Elector, error) {
	c, err := newConfig(l, opts)
	if err != nil {
		return nil, err
	}
	if c.minHold {
		return nil, fmt.Errorf("gocronlock: %w MinHold: an Elector must give up its key when it resigns", locker.ErrInvalidOption)
	}
	ctx, stop := context.WithCancel(context.Background())
	e := &Elector{
		l: l, key: c.prefix + key, opts: c.opts, cfg: c,
		stop: stop, stopped: ctx.Done(),
		done: make(chan struct{}), decided: make(chan struct{}),
	}
	go e.campaign(ctx)
	return e, nil
}

// IsLeader implements gocron.Elector: nil while this replica leads. Until
// the campaign's first try for the key has ended, it waits for it (for at
// most 10 s, or until ctx ends), so that of replicas started together
// exactly one leads their first tick. It returns an error matching
// ErrNotLeader otherwise, also matching locker.ErrClosed after Close.
func (e *Elector) IsLeader(ctx context.Context) error {
	select {
	case <-e.decided:
	default:
		t := time.NewTimer(firstOutcomeWait)
		select {
		case <-e.decided:
		case <-e.stopped:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	select {
	case <-e.stopped:
		return fmt.Errorf("%w: %w", ErrNotLeader, locker.ErrClosed)
	default:
	}
	e.mu.Lock()
	term := e.term
	e.mu.Unlock()
	// A term's Err reports its lock's loss as soon as the lock's deadline
	// has passed (see locker.Do).
	if term == nil || term.Err() != nil {
		return ErrNotLeader
	}
	return nil
}

// Close stops the campaign and resigns: when this replica leads, its term
// ends and the key is released before Close returns (within
// locker.DefaultReleaseTimeout). It does not close the Locker. Calls after
// the first return nil.
func (e *Elector) Close() error {
	e.stop()
	<-e.done
	return nil
}

// campaign tries for the key once, so that IsLeader has a first outcome,
// then campaigns with locker.Elect until ctx ends or the Locker is closed.
func (e *Elector) campaign(ctx context.Context) {
	defer close(e.done)
	defer e.decided1()
	lead := func(ctx context.Context) error {
		e.mu.Lock()
		e.term = ctx
		e.mu.Unlock()
		e.decided1()
		<-ctx.Done()
		return nil
	}
	err := locker.TryDo(ctx, e.l, e.key, lead, e.opts...)
	e.decided1()
	if ctx.Err() != nil {
		return
	}
	if err != nil && !errors.Is(err, locker.ErrNotAcquired) {
		e.cfg.logger.Warn("gocronlock: first try for the leadership failed, campaigning on", "key", e.key, "err", err)
	}
	err = locker.Elect(ctx, e.l, e.key, lead, e.opts...)
	if ctx.Err() == nil && !errors.Is(err, locker.ErrClosed) {
		e.cfg.logger.Error("gocronlock: the campaign ended: this replica will never lead", "key", e.key, "err", err)
	}
}

// decided1 marks the campaign's first outcome.
func (e *Elector) decided1() { e.decide.Do(func() { close(e.decided) }) }
