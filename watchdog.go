package locker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golocker/locker/driver"
)

// renewResult is what one renewal round brings back to the watchdog.
type renewResult struct {
	holds    []*hold
	ttls     []time.Duration // the TTL each lease was renewed for
	sent     time.Time
	validity []time.Duration
	errs     []error
}

// watchdog is the Locker's one renewal goroutine. It renews every held lock
// every TTL/3 (all locks due in the same window together, in one call when the
// driver renews in batches) and ends the locks whose local deadline passed
// without a successful renewal. Store calls run in other goroutines, at most
// one round of renewals and cleanupRounds rounds of cleanups at a time, so
// that a slow store never delays a deadline.
func (e *engine) watchdog() {
	defer e.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	results := make(chan renewResult, 1)
	inflight := false
	cleaned := make(chan []cleanup, cleanupRounds)
	cleaning := 0 // rounds of cleanups in flight
	// How far ahead of its renewal time a lock joins a round.
	window := e.cfg.ttl / 6
	for {
		e.passes.Add(1)
		now := time.Now()
		next := farFuture()
		var due, expired, maxed []*hold
		var expiredErr []error // the last renewal error of each expired hold
		e.mu.Lock()
		// A round starts when some lock is due and takes along every lock
		// due within the window, so that locks taken at different moments
		// fall into the same batches from then on.
		trigger := false
		for h := range e.holds {
			if !now.Before(h.deadline) {
				expired = append(expired, h)
				expiredErr = append(expiredErr, h.renewErr)
				continue
			}
			if !h.maxHoldEnd.IsZero() && !now.Before(h.maxHoldEnd) && !h.claimed.Load() {
				maxed = append(maxed, h)
				continue
			}
			next = minTime(next, h.deadline)
			if !h.maxHoldEnd.IsZero() {
				next = minTime(next, h.maxHoldEnd)
			}
			if h.renewing || inflight || h.claimed.Load() {
				// A claimed hold is being released: its deadline still
				// holds, but it is renewed no more.
				continue
			}
			if !now.Before(h.nextRenew) {
				trigger = true
			}
			if now.Add(window).Before(h.nextRenew) {
				next = minTime(next, h.nextRenew)
				continue
			}
			due = append(due, h)
		}
		if trigger {
			for _, h := range due {
				h.renewing = true
			}
		} else {
			for _, h := range due {
				next = minTime(next, h.nextRenew)
			}
			due = nil
		}
		// A wake-up still ahead stays planned, even when the lock it was
		// for is gone: a lock taken before it comes due after it, so that
		// register need not wake the watchdog for each Lock.
		if e.next.After(now) {
			next = minTime(next, e.next)
		}
		e.next = next
		e.mu.Unlock()

		for i, h := range expired {
			e.expire(h, expiredErr[i])
		}
		for _, h := range maxed {
			e.maxOut(h)
		}
		if len(due) > 0 {
			inflight = true
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				results <- e.renew(due)
			}()
		}

		if cleaning < cleanupRounds {
			if cs := e.takeCleanups(now); len(cs) > 0 {
				cleaning++
				e.wg.Add(1)
				go func() {
					defer e.wg.Done()
					cleaned <- e.runCleanups(nil, cs)
				}()
			}
		}

		timer.Reset(time.Until(minTime(next, e.nextCleanup())))
		select {
		case <-timer.C:
		case <-e.wake:
		case r := <-results:
			inflight = false
			e.applyRenewals(r)
		case left := <-cleaned:
			cleaning--
			e.retryCleanups(left)
		case <-e.stop:
			if inflight {
				<-results
			}
			for ; cleaning > 0; cleaning-- {
				e.retryCleanups(<-cleaned)
			}
			return
		}
	}
}

// renewAfter is when a lock is renewed after the request that gave it
// validity v: every TTL/3, or a quarter into a validity shorter than the
// TTL (a ZooKeeper session granted less than the TTL after a reconnect),
// which leaves most of it for the renewal to land.
func renewAfter(ttl, v time.Duration) time.Duration {
	if v >= ttl {
		return ttl / 3
	}
	return min(ttl/3, v/4)
}

// ErrNoRenewal is the cause (with ErrLost) of a loss at the local
// deadline: no renewal succeeded in time, the store being unreachable or
// slow. When a renewal failed before the deadline, the lock's error also
// wraps the last such failure (a timeout, refused credentials, …).
var ErrNoRenewal = errors.New("no successful renewal before the local deadline")

// noRenewal is the cause of a loss at the local deadline: ErrNoRenewal, and
// the error of the last renewal that failed (nil when none was answered),
// which says why (the store unreachable, the credentials refused, …).
func noRenewal(last error) error {
	if last == nil {
		return ErrNoRenewal
	}
	return fmt.Errorf("%w; last renewal error: %w", ErrNoRenewal, last)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// renew sends one renewal round for holds.
func (e *engine) renew(holds []*hold) renewResult {
	r := renewResult{
		holds:    holds,
		ttls:     make([]time.Duration, len(holds)),
		sent:     time.Now(),
		validity: make([]time.Duration, len(holds)),
		errs:     make([]error, len(holds)),
	}
	leases := make([]driver.Lease, len(holds))
	e.mu.Lock() // Extend may move a MinHold
	for i, h := range holds {
		leases[i] = h.lease
		if e.perLockTTL {
			leases[i].TTL = h.storeTTL(r.sent)
		}
		r.ttls[i] = leases[i].TTL
	}
	e.mu.Unlock()
	// No round may outlive the earliest deadline it serves.
	deadline := holds[0].deadlineLocked(e)
	for _, h := range holds[1:] {
		deadline = minTime(deadline, h.deadlineLocked(e))
	}
	ctx, cancel := context.WithDeadline(e.ctx, deadline)
	defer cancel()

	if e.batcher != nil {
		v, errs, err := e.batcher.RenewBatch(ctx, leases)
		if err == nil && (len(v) != len(holds) || len(errs) != len(holds)) {
			err = errors.New("driver returned a batch result of the wrong length")
		}
		if err != nil {
			for i := range r.errs {
				r.errs[i] = err
			}
			return r
		}
		copy(r.validity, v)
		copy(r.errs, errs)
		return r
	}
	idx := make([]int, len(holds))
	for i := range idx {
		idx[i] = i
	}
	forEach(idx, renewWorkers, func(i int) {
		r.validity[i], r.errs[i] = e.renewer.Renew(ctx, leases[i])
	})
	return r
}

// expire ends h as lost at its local deadline: no renewal succeeded in
// time, the last one failing with lastErr (nil: none was answered).
func (e *engine) expire(h *hold, lastErr error) {
	if h.claimed.Load() {
		// An Unlock in progress releases it; the lock is lost at its
		// deadline all the same, and Err says so (not a clean release).
		h.end(e.err("hold", h.key, ErrLost, noRenewal(lastErr)))
		return
	}
	if h.lost(noRenewal(lastErr)) {
		// The store may still hold it (etcd and ZooKeeper keep it while
		// the lease or session lives): give it back.
		e.abandon(h)
	}
}

// maxOut ends h at the end of its MaxHold: the holder may run on, but the
// key is released (its MinHold, not longer, has passed).
func (e *engine) maxOut(h *hold) {
	e.mu.Lock()
	d := h.maxHold // Extend may change it
	e.mu.Unlock()
	if h.claim() && h.end(e.err("hold", h.key, ErrLost, maxHoldError(d))) {
		e.cfg.logger.Info("locker: MaxHold reached, lock released", "backend", e.name, "key", h.key, "maxhold", d)
		e.abandon(h)
	}
}

// setDeadline moves h's local deadline to d (e.mu held), and its due time
// with it.
func (h *hold) setDeadline(d time.Time) {
	h.deadline = d
	if !h.maxHoldEnd.IsZero() && h.maxHoldEnd.Before(d) {
		d = h.maxHoldEnd
	}
	h.due.Store(max(int64(d.Sub(h.e.born)), 1))
}

// overdue ends h at once when its local deadline or its MaxHold end has
// passed, as the watchdog would: so that Done and Err tell the truth when
// they are asked, even when the watchdog runs late (a process starved of
// CPU, a container throttled, a long pause), and the holder that checks
// them before a write never goes on past the point where the store could
// give the key to someone else.
func (h *hold) overdue() {
	due := h.due.Load()
	if due == 0 || time.Since(h.e.born) < time.Duration(due) {
		return
	}
	if !h.ended.Load() {
		e := h.e
		e.mu.Lock()
		now := time.Now()
		expired := !now.Before(h.deadline)
		maxed := !h.maxHoldEnd.IsZero() && !now.Before(h.maxHoldEnd)
		lastErr := h.renewErr
		e.mu.Unlock()
		switch {
		case expired:
			e.expire(h, lastErr)
		case maxed:
			e.maxOut(h)
		}
	}
	if h.ended.Load() {
		// Ended here, or by the watchdog at this very moment: end closes
		// done right after (it blocks on nothing the caller holds). A
		// channel is made for this wait only if end has not got that far.
		<-h.doneChan()
	}
}

func (h *hold) deadlineLocked(e *engine) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return h.deadline
}

// applyRenewals moves deadlines forward for renewed locks, ends the locks the
// store no longer has, and schedules retries for unknown outcomes.
func (e *engine) applyRenewals(r renewResult) {
	// Retry an unknown outcome after TTL/10.
	retry := time.Now().Add(max(e.cfg.ttl/10, 10*time.Millisecond))
	var lost []*hold
	var lostErr []error
	e.mu.Lock()
	for i, h := range r.holds {
		h.renewing = false
		if h.claimed.Load() {
			// Unlock or Close is releasing it: a renewal that found it
			// gone says nothing about a loss.
			continue
		}
		err := r.errs[i]
		switch {
		case err == nil:
			v := r.validity[i]
			if v <= 0 {
				v = r.ttls[i]
			}
			h.setDeadline(r.sent.Add(safeValidity(v)))
			h.nextRenew = r.sent.Add(renewAfter(h.ttl, v))
			h.renewErr = nil
		case errors.Is(err, driver.ErrNotHeld):
			lost = append(lost, h)
			lostErr = append(lostErr, err)
		default:
			h.nextRenew = retry
			h.renewErr = err
			e.cfg.logger.Warn("locker: renewal failed, retrying", "backend", e.name, "key", h.key, "err", err)
		}
	}
	e.mu.Unlock()
	for i, h := range lost {
		h.lost(lostErr[i])
	}
	if e.cfg.observer != nil {
		failures := 0
		for _, err := range r.errs {
			if err != nil {
				failures++
			}
		}
		e.observe(Event{Kind: EventRenewal, Start: r.sent, Wait: time.Since(r.sent), Count: len(r.holds), Failures: failures})
	}
}

// cleanup is store state the engine removes in the background: the lease of
// a lock it gave up on, or what a failed acquisition left (a Residue).
type cleanup struct {
	key     string
	lease   *driver.Lease
	residue func(context.Context) error
	// keepUntil, when ahead, keeps the lease's key claimed until then
	// (its MinHold) instead of releasing it.
	keepUntil time.Time
	// gone, when set, is when the store drops what the cleanup removes by
	// itself once nothing of the Locker keeps it alive (see pollShared).
	gone time.Time
}

// run makes one attempt; nil means nothing is left to do.
func (c cleanup) run(ctx context.Context, e *engine) error {
	var err error
	if c.lease != nil {
		err = e.giveUp(ctx, *c.lease, c.keepUntil)
	} else {
		err = c.residue(ctx)
	}
	if errors.Is(err, driver.ErrNotHeld) {
		return nil
	}
	return err
}

// abandon queues the lease of a lock the engine gave up on (its renewals
// failed until the local deadline, its release had an unknown outcome, or
// its Unlock came with an ended ctx), so that the watchdog releases it in
// the store at once: stores whose locks live as long as a lease or session
// that the Locker keeps alive never forget them.
func (e *engine) abandon(h *hold) {
	e.addCleanup(h.cleanup())
}

// keepResidue queues what a failed acquisition left in the store, when its
// error carries a driver.Residue.
func (e *engine) keepResidue(key string, err error) {
	if r := residueOf(err); r != nil && r.Cleanup != nil {
		e.addCleanup(cleanup{key: key, residue: r.Cleanup, gone: r.Gone})
	}
}

// residueOf returns the driver.Residue in err's chain, or nil. Its target
// escapes to the heap: a caller that declared it would allocate it on
// every call, errors or not.
func residueOf(err error) *driver.Residue {
	var r *driver.Residue
	if errors.As(err, &r) {
		return r
	}
	return nil
}

func (e *engine) addCleanup(c cleanup) {
	e.mu.Lock()
	e.cleanups = append(e.cleanups, c)
	e.mu.Unlock()
	e.poke()
}

// takeCleanups returns the cleanups due for an attempt.
func (e *engine) takeCleanups(now time.Time) []cleanup {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.cleanups) == 0 || now.Before(e.cleanAfter) {
		return nil
	}
	cs := e.cleanups
	e.cleanups = nil
	return cs
}

// nextCleanup is when the cleanups are next due.
func (e *engine) nextCleanup() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.cleanups) == 0 {
		return farFuture()
	}
	return e.cleanAfter
}

// cleanupRounds is how many rounds of cleanups may run at once. A round
// ends when its slowest cleanup does, and an undo that waits out its
// request's fence (driver.StoreClock.AwaitFence) takes up to a quarter of
// a TTL: cleanups queued behind such a round start beside it instead of
// after it.
const cleanupRounds = 4

// maxCleanupDelay caps the pause between two rounds of failed cleanups (and
// so does TTL/10), so that what is left goes soon after the store answers
// again.
const maxCleanupDelay = time.Second

// retryCleanups puts back the cleanups that failed, for another attempt
// after a pause that doubles from 25 ms up to maxCleanupDelay while rounds
// keep failing; a round without failures resets it.
func (e *engine) retryCleanups(left []cleanup) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(left) == 0 {
		e.cleanFails = 0
		return
	}
	e.cleanups = append(e.cleanups, left...)
	delay := min(25*time.Millisecond<<min(e.cleanFails, 16), maxCleanupDelay, max(e.cfg.ttl/10, 10*time.Millisecond))
	e.cleanFails++
	e.cleanAfter = time.Now().Add(driver.Jitter(delay))
}

// runCleanups runs cs with ctx (nil: each bounded by the release timeout
// under e.ctx), and returns those that failed. Once the Locker is closing
// (e.ctx ended), a cleanup whose gone has passed counts as done, and no try
// of it outlasts its gone: nothing of the Locker keeps what it removes
// alive any more. While the Locker is open, a session it keeps alive may
// hold a record past gone.
func (e *engine) runCleanups(ctx context.Context, cs []cleanup) []cleanup {
	closing := e.ctx.Err() != nil
	var mu sync.Mutex
	var left []cleanup
	forEach(cs, renewWorkers, func(c cleanup) {
		expires := closing && !c.gone.IsZero()
		if expires && !time.Now().Before(c.gone) {
			return // the store has dropped it by itself
		}
		cctx := ctx
		if cctx == nil {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(e.ctx, e.cfg.releaseTimeout)
			defer cancel()
		}
		if expires {
			// No try is worth more time than the store keeps what it
			// removes.
			var cancel context.CancelFunc
			cctx, cancel = context.WithDeadline(cctx, c.gone)
			defer cancel()
		}
		err := c.run(cctx, e)
		if c.lease != nil && e.cfg.observer != nil {
			e.observe(Event{Kind: EventBackgroundRelease, Key: strings.TrimPrefix(c.key, e.cfg.prefix), Token: c.lease.Token, Err: err})
		}
		if err != nil {
			if expires && !time.Now().Before(c.gone) {
				return // failed, but the store has dropped it meanwhile
			}
			if errors.Is(err, driver.ErrPermanent) {
				e.cfg.logger.Warn("locker: background cleanup failed for good; the store expires what is left", "backend", e.name, "key", c.key, "err", err)
				return
			}
			e.cfg.logger.Warn("locker: background cleanup failed, retrying", "backend", e.name, "key", c.key, "err", err)
			mu.Lock()
			left = append(left, c)
			mu.Unlock()
		}
	})
	return left
}
