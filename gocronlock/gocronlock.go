// Package gocronlock runs gocron v2 jobs on exactly one of several
// replicas per tick, through any locker.Locker:
//
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(
//		gocronlock.NewLocker(l, gocronlock.MinHold(950*time.Millisecond))))
//
// gocron asks its Locker for the job's name before each run and skips the
// run when the Locker says no; "it is expected that the locker
// implementation handles time splay between schedulers". This one does:
// with MinHold close to the job's interval, a replica whose tick fires late
// finds the key still taken, even when the job took a millisecond. Without
// it, a short job ends and releases before the late replica's tick, which
// runs the job again.
//
// NewElector makes one replica the leader instead (gocron.WithDistributedElector):
// only the leader's scheduler runs jobs.
//
// The package is a module of its own, so that gocron enters only the
// builds of programs that use it.
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

// Option configures NewLocker and NewElector.
type Option func(*config)

type config struct {
	prefix string
	opts   []locker.LockOption
}

// MinHold keeps each run's key claimed until d after it was taken, after a
// short job ended (locker.MinHold): set it a little below the job's
// interval, above the largest skew between the replicas' schedulers.
func MinHold(d time.Duration) Option {
	return func(c *config) { c.opts = append(c.opts, locker.MinHold(d)) }
}

// MaxHold releases each run's key d after it was taken, however long the
// job runs (locker.MaxHold), so that a hung job never blocks the next runs
// for longer; the job itself is not stopped (gocron owns it).
func MaxHold(d time.Duration) Option {
	return func(c *config) { c.opts = append(c.opts, locker.MaxHold(d)) }
}

// Prefix is put before every job name to make its key, so that several
// schedulers (or applications) sharing a Locker do not share keys.
func Prefix(s string) Option { return func(c *config) { c.prefix = s } }

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// releaseTimeout bounds a release: gocron passes an already-cancelled ctx to
// Unlock at Shutdown.
const releaseTimeout = locker.DefaultReleaseTimeout

// NewLocker returns a gocron.Locker that takes the job's key with TryLock:
// the replica that gets it runs the job, the others skip the tick (gocron
// skips a run when Lock returns an error).
func NewLocker(l locker.Locker, opts ...Option) gocron.Locker {
	return &jobLocker{l: l, cfg: newConfig(opts)}
}

type jobLocker struct {
	l   locker.Locker
	cfg config
}

// Lock implements gocron.Locker.
func (j *jobLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if j.l == nil {
		return nil, fmt.Errorf("gocronlock: %w: nil locker.Locker", locker.ErrInvalidOption)
	}
	lk, err := j.l.TryLock(ctx, j.cfg.prefix+key, j.cfg.opts...)
	if err != nil {
		return nil, err
	}
	return jobLock{lk}, nil
}

type jobLock struct{ lk locker.Lock }

// Unlock implements gocron.Lock, with a fresh bounded ctx: gocron's may have
// ended (Shutdown), and the key must still be released (or kept for its
// MinHold).
func (j jobLock) Unlock(ctx context.Context) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return j.lk.Unlock(uctx)
}

// ErrNotLeader is returned by the Elector's IsLeader on a replica that does
// not lead.
var ErrNotLeader = errors.New("gocronlock: not the leader")

// NewElector returns a gocron.Elector backed by locker.Elect on key: the
// replica that holds key leads, and leads again after its term ends only by
// winning a new campaign. It campaigns in the background from the first
// IsLeader call until l is closed. Prefix applies to key; MinHold does not
// apply; MaxHold bounds a term.
func NewElector(l locker.Locker, key string, opts ...Option) gocron.Elector {
	c := newConfig(opts)
	return &elector{l: l, key: c.prefix + key, opts: c.opts}
}

type elector struct {
	l    locker.Locker
	key  string
	opts []locker.LockOption

	start sync.Once
	mu    sync.Mutex
	term  <-chan struct{} // closed when the current term ends; nil before the first
}

// IsLeader implements gocron.Elector: nil while this replica's term lasts.
func (e *elector) IsLeader(ctx context.Context) error {
	if e.l == nil {
		return fmt.Errorf("gocronlock: %w: nil locker.Locker", locker.ErrInvalidOption)
	}
	e.start.Do(func() { go e.campaign() })
	e.mu.Lock()
	term := e.term
	e.mu.Unlock()
	if term == nil {
		return ErrNotLeader
	}
	select {
	case <-term:
		return ErrNotLeader
	default:
		return nil
	}
}

// campaign runs locker.Elect until the Locker is closed; each term lasts
// until its lock is lost. The term's lock is the nested hold of Elect's
// (locker.New's Lockers are reentrant); for other Lockers, the term's ctx.
func (e *elector) campaign() {
	_ = locker.Elect(context.Background(), e.l, e.key, func(ctx context.Context) error {
		// The term ends when its lock does: the lock's Done closes before
		// anyone else can lead (the ctx ends a moment later).
		term := ctx.Done()
		if lk, err := e.l.TryLock(ctx, e.key); err == nil {
			term = lk.Done()
		}
		e.mu.Lock()
		e.term = term
		e.mu.Unlock()
		<-ctx.Done()
		return nil
	}, e.opts...)
}
