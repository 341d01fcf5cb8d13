package locker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golocker/locker/driver"
)

// ErrMaxHold is the cause of the end of a lock held for its [MaxHold]: the
// lock's Err matches [ErrLost] and ErrMaxHold, and the ctx [Do] passes to
// its function is cancelled with it.
var ErrMaxHold = errors.New("locker: MaxHold reached")

// LockOption configures one acquisition: [Locker.Lock], [Locker.TryLock],
// [Do] and [TryDo] take them after their other arguments. A bad value, or
// one the backend cannot honour, makes the call return an error matching
// [ErrInvalidOption] that names the option, and nothing is acquired. A
// nested hold (Lock inside Do's function on the same key) keeps the outer
// lock's options.
type LockOption func(*lockConfig) error

// lockConfig is the resolved set of lock options; zero means unset.
type lockConfig struct {
	ttl     time.Duration
	minHold time.Duration
	maxHold time.Duration
	// minHoldSet: MinHold was given, 0 included (Extend drops a MinHold).
	minHoldSet bool
	data       []byte // WithData; nil: none
	dataSet    bool   // WithData was given (Extend refuses it)
}

// TTL sets this lock's time to live instead of the Locker's (WithTTL): how
// long the store keeps it without a renewal. At least [MinTTL]. Backends
// whose TTL belongs to a connection (ZooKeeper's session) refuse it.
func TTL(d time.Duration) LockOption {
	return func(c *lockConfig) error {
		if d < MinTTL {
			return invalidOption("TTL", "%v is shorter than the minimum %v", d, MinTTL)
		}
		c.ttl = d
		return nil
	}
}

// MinHold keeps the key claimed in the store until d after the acquisition
// (ShedLock's lockAtLeastFor): Unlock, Do's and TryDo's release, Close, and
// a crash of the holder all leave it taken until then, on the store's clock,
// with no process and no renewal needed; Unlock returns at once. A job
// scheduled on several replicas whose ticks are skewed holds its key for
// nearly the schedule's interval, so that a late replica finds it taken
// instead of running the tick again:
//
//	err := locker.TryDo(ctx, l, "nightly-mail", send, locker.MinHold(950*time.Millisecond)) // ticks every 1 s
//
// 0 means none. A backend that cannot keep a key after its holder let go
// refuses it.
func MinHold(d time.Duration) LockOption {
	return func(c *lockConfig) error {
		if d < 0 {
			return invalidOption("MinHold", "%v is negative", d)
		}
		c.minHold, c.minHoldSet = d, true
		return nil
	}
}

// MaxHold ends the lock d after its acquisition, however long its holder
// runs (ShedLock's lockAtMostFor): renewals stop, Done closes, Err matches
// [ErrLost] and [ErrMaxHold], the ctx [Do] passes to its function is
// cancelled with ErrMaxHold, and the key is released, so that a hung job
// never blocks it for longer. It must be positive and not shorter than
// MinHold.
func MaxHold(d time.Duration) LockOption {
	return func(c *lockConfig) error {
		if d <= 0 {
			return invalidOption("MaxHold", "%v is not positive", d)
		}
		c.maxHold = d
		return nil
	}
}

// lockOptions resolves opts for the engine's backend.
func (e *engine) lockOptions(opts []LockOption) (lockConfig, error) {
	var c lockConfig
	if len(opts) > 0 { // without options nothing escapes
		var err error
		if c, err = applyLockOptions(opts); err != nil {
			return c, err
		}
	}
	if c.ttl == 0 {
		c.ttl = e.cfg.ttl
	}
	if c.ttl != e.cfg.ttl && !e.perLockTTL {
		return c, invalidOption("TTL", "the %s backend has one TTL for all the locks of a Locker (%v): set it with WithTTL", e.name, e.cfg.ttl)
	}
	if err := e.checkDataOption(c, false); err != nil {
		return c, err
	}
	return c, e.checkMinHold(c.minHold, c.ttl)
}

// checkMinHold refuses a MinHold of d for a lock of TTL ttl that the
// backend cannot honour.
func (e *engine) checkMinHold(d, ttl time.Duration) error {
	if d <= 0 {
		return nil
	}
	if e.keeper == nil {
		return invalidOption("MinHold", "the %s backend cannot keep a key claimed after its holder let go", e.name)
	}
	if d > ttl && !e.perLockTTL {
		return invalidOption("MinHold", "%v is longer than the TTL %v, and the %s backend cannot lengthen one lock's TTL: raise WithTTL", d, ttl, e.name)
	}
	return nil
}

// applyLockOptions applies opts to a zero lockConfig, with the checks that
// need no backend.
func applyLockOptions(opts []LockOption) (lockConfig, error) {
	c := new(lockConfig)
	for _, o := range opts {
		if o == nil {
			return *c, invalidOption("LockOption", "nil option")
		}
		if err := o(c); err != nil {
			return *c, err
		}
	}
	if c.maxHold > 0 && c.maxHold < c.minHold {
		return *c, invalidOption("MaxHold", "%v is shorter than MinHold %v", c.maxHold, c.minHold)
	}
	return *c, nil
}

// storeTTL is the TTL to ask the store for at now: the lock's own, or more
// while its MinHold runs past it, so that the key outlives a crash of its
// holder until the MinHold ends (e.mu held).
func (h *hold) storeTTL(now time.Time) time.Duration { return storeTTLUntil(h.ttl, h.minHoldEnd, now) }

// storeTTLUntil is the TTL to ask the store for at now, for a lock of
// TTL ttl whose MinHold ends at minHoldEnd (zero: none).
func storeTTLUntil(ttl time.Duration, minHoldEnd, now time.Time) time.Duration {
	if minHoldEnd.IsZero() || minHoldEnd.Sub(now) <= ttl {
		return ttl
	}
	// Rounded up, so that the leases of one renewal round share a few
	// TTLs (stores that renew in batches group them by TTL).
	return minHoldEnd.Sub(now).Truncate(storeTTLStep) + storeTTLStep
}

// storeTTLStep is the rounding of the TTLs that a MinHold lengthens.
const storeTTLStep = 100 * time.Millisecond

// giveUp releases l, or keeps its key claimed until keepUntil when that is
// still ahead.
func (e *engine) giveUp(ctx context.Context, l driver.Lease, keepUntil time.Time) error {
	if !keepUntil.IsZero() && e.keeper != nil {
		if rem := time.Until(keepUntil); rem > 0 {
			return e.keeper.Keep(ctx, l, rem)
		}
	}
	return e.drv.Release(ctx, l)
}

// maxHoldError is the cause a lock ends with at its MaxHold.
func maxHoldError(d time.Duration) error { return fmt.Errorf("%w (%v)", ErrMaxHold, d) }
