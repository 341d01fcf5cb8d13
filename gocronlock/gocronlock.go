// Package gocronlock runs gocron v2 jobs on exactly one of several
// replicas per tick, through any locker.Locker:
//
//	jl, err := gocronlock.NewLocker(l, gocronlock.MinHold(950*time.Millisecond))
//	…
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(jl))
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
// only the leader's scheduler runs jobs. It campaigns from the moment it is
// made, so the first tick runs on the leader. gocron's Shutdown does not
// stop it: Close it after Shutdown, and another replica leads at once.
//
// A run the Locker refuses for any reason other than another replica
// holding the key is logged at ERROR (see Logger); gocron itself skips it
// silently. An option the Locker would refuse at every run makes NewLocker
// or NewElector fail instead.
//
// The package is a module of its own, so that gocron enters only the
// builds of programs that use it.
package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/golocker/locker"
)

// Option configures NewLocker and NewElector.
type Option func(*config) error

type config struct {
	prefix  string
	opts    []locker.LockOption
	minHold bool // MinHold was given: NewElector refuses it
	logger  *slog.Logger
}

// MinHold keeps each run's key claimed until d after it was taken, after a
// short job ended (locker.MinHold): set it a little below the job's
// interval, above the largest skew between the replicas' schedulers.
// NewLocker refuses a d that the Locker refuses (see
// locker.CheckLockOptions); NewElector refuses MinHold.
func MinHold(d time.Duration) Option {
	return func(c *config) error {
		c.opts = append(c.opts, locker.MinHold(d))
		c.minHold = true
		return nil
	}
}

// MaxHold releases each run's key d after it was taken, however long the
// job runs (locker.MaxHold), so that a hung job never blocks the next runs
// for longer; the job itself is not stopped (gocron owns it). For an
// Elector it bounds a term.
func MaxHold(d time.Duration) Option {
	return func(c *config) error {
		c.opts = append(c.opts, locker.MaxHold(d))
		return nil
	}
}

// Prefix is put before every job name to make its key, so that several
// schedulers (or applications) sharing a Locker do not share keys.
func Prefix(s string) Option {
	return func(c *config) error {
		c.prefix = s
		return nil
	}
}

// Logger sends the adapter's reports to l: every run that the Locker
// refused for a reason other than another replica holding the key, at
// ERROR (gocron skips such a run and logs nothing). The default discards
// them.
func Logger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("gocronlock: %w Logger: nil *slog.Logger", locker.ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// newConfig applies opts and checks them, and l, with the Locker's own
// checks of every acquisition.
func newConfig(l locker.Locker, opts []Option) (config, error) {
	c := config{logger: slog.New(slog.DiscardHandler)}
	if l == nil {
		return c, fmt.Errorf("gocronlock: %w: nil locker.Locker", locker.ErrInvalidOption)
	}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("gocronlock: %w: nil Option", locker.ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	if err := locker.CheckLockOptions(l, c.opts...); err != nil {
		return c, fmt.Errorf("gocronlock: %w", err)
	}
	return c, nil
}

// releaseTimeout bounds a release: gocron passes an already-cancelled ctx to
// Unlock at Shutdown.
const releaseTimeout = locker.DefaultReleaseTimeout

// NewLocker returns a gocron.Locker that takes the job's key with TryLock:
// the replica that gets it runs the job, the others skip the tick (gocron
// skips a run when Lock returns an error). It returns an error matching
// locker.ErrInvalidOption for a nil Locker, a nil or bad Option, or an
// option the Locker refuses (a MinHold longer than its TTL on some
// backends), so that no misconfiguration skips every tick quietly.
func NewLocker(l locker.Locker, opts ...Option) (gocron.Locker, error) {
	c, err := newConfig(l, opts)
	if err != nil {
		return nil, err
	}
	return &jobLocker{l: l, cfg: c}, nil
}

type jobLocker struct {
	l   locker.Locker
	cfg config
}

// Lock implements gocron.Locker. An error other than the key being held
// elsewhere (or gocron's ctx having ended) is logged at ERROR: gocron
// skips the run and says nothing.
func (j *jobLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lk, err := j.l.TryLock(ctx, j.cfg.prefix+key, j.cfg.opts...)
	switch {
	case err == nil:
		return jobLock{lk: lk, logger: j.cfg.logger}, nil
	case errors.Is(err, locker.ErrNotAcquired):
		j.cfg.logger.Debug("gocronlock: run skipped: another replica holds the key", "job", key, "err", err)
	default:
		j.cfg.logger.Error("gocronlock: run skipped: the Locker refused it", "job", key, "err", err)
	}
	return nil, err
}

type jobLock struct {
	lk     locker.Lock
	logger *slog.Logger
}

// Unlock implements gocron.Lock, with a fresh bounded ctx: gocron's may have
// ended (Shutdown), and the key must still be released (or kept for its
// MinHold).
func (j jobLock) Unlock(ctx context.Context) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := j.lk.Unlock(uctx)
	if err != nil {
		// gocron drops it.
		j.logger.Warn("gocronlock: release after the run failed", "key", j.lk.Key(), "err", err)
	}
	return err
}
