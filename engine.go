package locker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/golocker/locker/driver"
)

// configureTimeout bounds a driver's Configure call during New.
const configureTimeout = 30 * time.Second

// renewWorkers bounds the concurrent Renew calls of one tick for drivers that
// cannot renew in batches, and the concurrent releases of Close.
const renewWorkers = 8

// New turns a driver into a Locker. Backends call it from their constructors;
// users call the backends' constructors (redis.New, memory.New, …).
//
// New validates the options, hands the resolved configuration to the driver
// when it implements [driver.Configurer], and starts the Locker's single
// renewal goroutine. It returns an error matching [ErrInvalidOption] for a
// bad option or a driver that implements neither [driver.Renewer] nor
// [driver.BatchRenewer], or wrapping the driver's Configure error.
func New(d driver.Driver, opts ...Option) (Locker, error) {
	if d == nil {
		return nil, &Error{Op: "new", Err: ErrInvalidOption, Cause: errors.New("nil driver")}
	}
	info := d.Info()
	renewer, _ := d.(driver.Renewer)
	batcher, _ := d.(driver.BatchRenewer)
	if renewer == nil && batcher == nil {
		return nil, &Error{Op: "new", Backend: info.Name, Err: ErrInvalidOption,
			Cause: fmt.Errorf("driver %T implements neither driver.Renewer nor driver.BatchRenewer", d)}
	}
	cfg, err := resolve(opts)
	if err == nil && info.MaxKeyBytes > 0 && len(cfg.prefix) >= info.MaxKeyBytes {
		err = cfg.invalid("WithPrefix", "the prefix is %d bytes and leaves no room for a key: the %s backend allows at most %d bytes, prefix included",
			len(cfg.prefix), info.Name, info.MaxKeyBytes)
	}
	if err != nil {
		return nil, &Error{Op: "new", Backend: info.Name, Cause: err}
	}
	// The Locker's ctx, which Close cancels, is the driver's Config.Closing.
	closing, closed := context.WithCancelCause(context.Background())
	if c, ok := d.(driver.Configurer); ok {
		ctx, cancel := context.WithTimeout(context.Background(), configureTimeout)
		err := c.Configure(ctx, driver.Config{TTL: cfg.ttl, Label: cfg.label, Logger: cfg.logger,
			Backoff: driver.Backoff(cfg.backoff), Closing: closing})
		cancel()
		if err != nil {
			closed(nil)
			return nil, &Error{Op: "new", Backend: info.Name, Cause: cfg.refusedParam(err)}
		}
	}
	e := &engine{
		drv:        d,
		name:       info.Name,
		max:        info.MaxKeyBytes,
		perLockTTL: info.PerLockTTL,
		inline:     info.PromptCancel,
		cfg:        cfg,
		holds:      make(map[*hold]struct{}),
		gates:      make(map[string]*gate),
		inflight:   make(map[uint64]context.CancelCauseFunc),
		wake:       make(chan struct{}, 1),
		work:       make(chan job),
		stop:       make(chan struct{}),
		closedDone: closedChan(),
		next:       farFuture(),
		born:       time.Now(),
	}
	e.notifier, _ = d.(driver.Notifier)
	e.acquirer, _ = d.(driver.Acquirer)
	e.renewer, e.batcher = renewer, batcher
	e.keeper, _ = d.(driver.Keeper)
	e.sharer, _ = d.(driver.Sharer)
	e.dataSetter, _ = d.(driver.DataSetter)
	e.multiReleaser, _ = d.(driver.MultiReleaser)
	e.ctx, e.cancel = closing, closed
	e.background = closingContext{Context: context.Background(), e: e}
	e.wg.Add(1)
	go e.watchdog()
	return e, nil
}

// DriverState returns the driver's own state for a lock handed out by a
// Locker built with [New] (a node path, a row version, …), for backends that
// offer guards such as a conditional transaction on still holding the lock.
// It reports false for other Locks.
func DriverState(l Lock) (any, bool) {
	switch v := l.(type) {
	case *handle:
		return v.h.lease.State, true
	case *nestedLock:
		return DriverState(v.outer)
	}
	return nil, false
}

// engine is the one lock engine: it turns a driver into a Locker.
type engine struct {
	drv      driver.Driver
	notifier driver.Notifier
	acquirer driver.Acquirer
	renewer  driver.Renewer // used only without batcher
	batcher  driver.BatchRenewer
	keeper   driver.Keeper
	sharer   driver.Sharer
	// dataSetter: the driver stores data with a hold (locker.WithData)
	dataSetter driver.DataSetter
	// multiReleaser: the driver releases a MultiLock's keys in one call
	multiReleaser driver.MultiReleaser
	name          string
	// perLockTTL: the driver honours a TTL per lock (driver.Info).
	perLockTTL bool
	// inline: the driver's calls return promptly when their ctx ends
	// (driver.Info), so detached runs them in the caller's goroutine.
	inline bool
	max    int
	cfg    config

	ctx    context.Context // cancelled by Close: ends waits and store calls
	cancel context.CancelCauseFunc
	// background is the call context of a caller's context.Background()
	// (see callContext), made once.
	background context.Context

	mu     sync.Mutex
	closed bool
	holds  map[*hold]struct{} // held locks, renewed by the watchdog
	gates  map[string]*gate   // local per-key queues
	// spareGates are the last gates dropped, at most maxSpareGates, for
	// the next keys that need one: a LockMulti's set reuses them all.
	spareGates []*gate
	next       time.Time      // when the watchdog wakes up next at the latest
	calls      sync.WaitGroup // Lock, TryLock and Unlock calls in progress
	// inflight cancels the waits and store calls of the calls in
	// progress, for Close.
	inflight map[uint64]context.CancelCauseFunc
	callSeq  uint64

	cleanups   []cleanup // store state to remove in the background
	cleanAfter time.Time // when the cleanups are next tried
	cleanFails int       // rounds of cleanups that failed in a row

	wake chan struct{} // pokes the watchdog
	work chan job      // hands a detached call to an idle worker (detach.go)
	// tryCalls and releaseCalls keep the detached calls of Lock's
	// attempts and of Unlock's releases for reuse.
	tryCalls     callPool[tryArgs, tryOutcome]
	releaseCalls callPool[releaseArgs, struct{}]
	// multiCalls and releaseAllCalls do the same for LockMulti's
	// attempts and MultiLock.Unlock's releases.
	multiCalls      callPool[takeMultiArgs, multiOutcome]
	releaseAllCalls callPool[releaseAllArgs, []error]
	stop            chan struct{} // closed by Close to stop the watchdog and the workers
	// closedDone is closed from the start: the Done of every hold that ended
	// before anyone asked for its own channel (see hold.doneChan).
	closedDone chan struct{}
	wg         sync.WaitGroup

	born time.Time // when New made it: the origin of hold.due

	// passes counts the watchdog's passes over the holds, for tests.
	passes atomic.Uint64
}

func farFuture() time.Time { return time.Now().Add(100 * 365 * 24 * time.Hour) }

func (e *engine) err(op, key string, sentinel, cause error) error {
	return &Error{Op: op, Backend: e.name, Key: key, Err: sentinel, Cause: cause}
}

// enter registers a call so that Close waits for it; it fails once closed.
func (e *engine) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.calls.Add(1)
	return true
}

// storeKey validates key and returns the store key.
func (e *engine) storeKey(op, key string) (string, error) {
	if key == "" {
		return "", e.err(op, key, ErrInvalidKey, errors.New("empty key"))
	}
	if !utf8.ValidString(key) {
		return "", e.err(op, key, ErrInvalidKey, errors.New("key is not valid UTF-8"))
	}
	skey := e.cfg.prefix + key
	if e.max > 0 && len(skey) > e.max {
		return "", e.err(op, key, ErrInvalidKey, fmt.Errorf("key is %d bytes with its prefix; the %s backend allows at most %d", len(skey), e.name, e.max))
	}
	return skey, nil
}

// Lock implements Locker.
func (e *engine) Lock(ctx context.Context, key string, opts ...LockOption) (Lock, error) {
	return e.lock(ctx, "lock", key, true, nil, opts)
}

// TryLock implements Locker.
func (e *engine) TryLock(ctx context.Context, key string, opts ...LockOption) (Lock, error) {
	return e.lock(ctx, "trylock", key, false, nil, opts)
}

// lock takes key: exclusively when share is nil, else the shared hold it
// describes, which skips the reentrancy and the local gate (several
// callers of one Locker may hold a key's permits).
func (e *engine) lock(ctx context.Context, op, key string, wait bool, share *driver.Share, opts []LockOption) (lk Lock, err error) {
	var queued bool
	if e.cfg.observer != nil {
		start := time.Now()
		defer func() {
			ev := Event{Kind: EventAcquire, Ctx: ctx, Key: key, Start: start, Wait: time.Since(start), Queued: queued, Try: !wait, Err: err}
			if lk != nil {
				ev.Token = lk.Token()
			}
			e.observe(ev)
		}()
	}
	// The ctx first: a nil one is a programming error, and an ended one
	// (for example the ctx of a Do that has returned) confers nothing.
	if ctx == nil {
		return nil, e.err(op, key, ErrInvalidOption, errNilContext)
	}
	if ctx.Err() != nil {
		return nil, e.err(op, key, ErrNotAcquired, ctxCause(ctx))
	}
	skey, err := e.storeKey(op, key)
	if err != nil {
		return nil, err
	}
	lc, err := e.lockOptions(opts)
	if err != nil {
		return nil, e.err(op, key, nil, err)
	}
	if share != nil && e.sharer == nil {
		return nil, e.err(op, key, ErrInvalidOption, errNoSharer(e.name))
	}
	if err := e.checkDataOption(lc, share != nil); err != nil {
		return nil, e.err(op, key, nil, err)
	}
	if share == nil {
		if outer, err := e.heldIn(ctx, key); err != nil {
			return nil, e.err(op, key, ErrNotAcquired, err)
		} else if outer != nil {
			return &nestedLock{outer: outer}, nil
		}
	}
	if !e.enter() {
		return nil, e.err(op, key, ErrClosed, nil)
	}
	defer e.calls.Done()

	// Waits and store calls get a ctx that also ends when the Locker is
	// closed. Close waits for them: for a store that does not answer, as
	// long as the driver takes to honour that ctx. A caller whose ctx can
	// end has returned by then (detach.go); one whose ctx never ends, on a
	// driver without PromptCancel, waits as long as Close does (one read
	// timeout of a Redis client of the caller's, for example).
	cctx, scope := e.callContext(ctx)
	defer scope.end()

	// The hold, its gate ticket and its handle are one allocation.
	h := &hold{e: e, key: key, shared: share != nil, ttl: lc.ttl, minHold: lc.minHold, maxHold: lc.maxHold}
	if share == nil {
		h.gate, err = e.enterGateWith(cctx, skey, wait, &h.ticket)
		if err == errHeldLocally {
			return nil, e.err(op, key, ErrNotAcquired, err)
		}
		if err != nil {
			return nil, e.waitErr(op, key, ctx, err, nil)
		}
	}
	req := driver.Request{Key: skey, Label: e.cfg.label, Data: lc.data, TTL: lc.ttl, Lost: h.driverLost}
	if e.perLockTTL {
		// The key outlives a crash of its holder until its MinHold ends.
		req.TTL = max(lc.ttl, lc.minHold)
	}

	var (
		grant   driver.Grant
		sent    time.Time
		lastErr error // the last store error a wait rode out
	)
	for attempt := 0; ; attempt++ {
		// Each attempt has its own owner token: what a failed one left in
		// the store is cleaned up with its token, never with this one's.
		req.Owner = rand.Text()
		var (
			a    tryOutcome
			gone bool
		)
		if e.inlineFor(ctx) {
			// No closures to allocate: detached would run it inline too.
			a, err = e.try(cctx, req, share, wait)
		} else {
			// The attempt's arguments are copied into the pooled call:
			// req and *share stay on the stack.
			at := tryArgs{e: e, ctx: cctx, req: req, share: copyShare(share), wait: wait}
			a, err, gone = detachedWith(e, &e.tryCalls, true, ctx, cctx, tryArgs.run, at,
				func() func(tryOutcome, error) { return e.lateAttempt(at.req, h.gate) })
		}
		if gone {
			// The attempt goes on without its caller: a loss it reports
			// is nobody's, and it gives the gate back when it ends.
			h.claim()
			h.gate = nil
		}
		grant, sent = a.grant, a.sent
		if err == nil {
			break
		}
		e.keepResidue(skey, err)
		if errors.Is(err, driver.ErrHeld) {
			h.gate.leave()
			return nil, e.err(op, key, ErrNotAcquired, err)
		}
		if errors.Is(err, driver.ErrConflict) {
			h.gate.leave()
			return nil, e.err(op, key, ErrInvalidOption, err)
		}
		if errors.Is(err, errGrantedLate) && !wait {
			h.gate.leave()
			return nil, e.err(op, key, ErrNotAcquired, err)
		}
		if !wait || cctx.Err() != nil || permanent(err) {
			h.gate.leave()
			return nil, e.waitErr(op, key, ctx, err, lastErr)
		}
		// A waiting Lock rides out store errors, and grants that came
		// back late, until its ctx ends: each after the same pause, so a
		// store slower than the validity is not asked back to back.
		lastErr = err
		e.cfg.logger.Warn("locker: store error while waiting, retrying", "backend", e.name, "key", key, "attempt", attempt+1, "err", err)
		if !driver.Sleep(cctx, e.retryDelay(attempt)) {
			h.gate.leave()
			return nil, e.waitErr(op, key, ctx, cctx.Err(), lastErr)
		}
	}
	h.lease = driver.Lease{Key: skey, Owner: req.Owner, TTL: req.TTL}
	queued = grant.Queued
	if err := e.register(h, grant, sent); err != nil {
		return nil, err
	}
	h.self.h = h
	return &h.self, nil
}

// tryArgs is the arguments of one detached acquisition attempt of lock.
type tryArgs struct {
	e     *engine
	ctx   context.Context
	req   driver.Request
	share *driver.Share
	wait  bool
}

func (a tryArgs) run() (tryOutcome, error) { return a.e.try(a.ctx, a.req, a.share, a.wait) }

// releaseArgs is the arguments of one detached store release of Unlock.
type releaseArgs struct {
	h   *hold
	ctx context.Context
}

func (r releaseArgs) run() (struct{}, error) { return struct{}{}, r.h.release(r.ctx) }

// copyShare returns a copy of *s, or nil for a nil s.
func copyShare(s *driver.Share) *driver.Share {
	if s == nil {
		return nil
	}
	c := *s
	return &c
}

// try makes one acquisition attempt of lock: the driver call that share
// and wait call for.
func (e *engine) try(ctx context.Context, req driver.Request, share *driver.Share, wait bool) (a tryOutcome, err error) {
	a.sent = time.Now()
	switch {
	case share != nil && !wait:
		a.grant, err = e.sharer.TryAcquireShared(ctx, req, *share)
	case share != nil:
		a.grant, err = e.pollShared(ctx, req, *share)
	case !wait:
		a.grant, err = e.drv.TryAcquire(ctx, req)
	case e.acquirer != nil:
		// The driver's queue decides; it reports in Grant.Since when
		// the request behind the validity was sent.
		a.grant, err = e.acquirer.Acquire(ctx, req)
	default:
		a.grant, err = e.poll(ctx, req)
	}
	if err != nil {
		return a, err
	}
	return e.confirmLate(ctx, req, a)
}

// errGrantedLate is the cause of an attempt whose grant came back past its
// validity and was no longer the caller's when confirmed.
var errGrantedLate = errors.New("the store granted the key past its validity, and no longer held it for this caller when asked again")

// confirmLate returns a, whose grant is still valid, unchanged. A grant
// that came back past its validity (a request that waited for a
// connection, a stalled process) would be a lock lost before its caller
// sees it, whose key the store may already have handed on: it is renewed
// first, and returned with the renewal's validity. When the store no
// longer holds it, the error wraps errGrantedLate; on another error of
// the renewal, it wraps that. Either way the grant is cleaned up in the
// background.
func (e *engine) confirmLate(ctx context.Context, req driver.Request, a tryOutcome) (tryOutcome, error) {
	since, validity := a.sent, a.grant.Validity
	if !a.grant.Since.IsZero() {
		since = a.grant.Since
	}
	if validity <= 0 {
		validity = req.TTL
	}
	if time.Now().Before(since.Add(safeValidity(validity))) {
		return a, nil
	}
	lease := driver.Lease{Key: req.Key, Owner: req.Owner, TTL: req.TTL, Token: a.grant.Token, State: a.grant.State}
	sent := time.Now()
	v, err := e.renewOne(ctx, lease)
	if err == nil {
		a.sent, a.grant.Since, a.grant.Validity = sent, sent, v
		return a, nil
	}
	e.addCleanup(cleanup{key: req.Key, lease: &lease})
	if errors.Is(err, driver.ErrNotHeld) {
		return a, fmt.Errorf("%w: %w", errGrantedLate, err)
	}
	return a, fmt.Errorf("confirming a grant that came back past its validity: %w", err)
}

// callContext returns ctx, also cancelled (with cause ErrClosed) when the
// Locker closes, for the waits and store calls of one Lock, TryLock or
// Unlock that entered; the caller ends the returned scope when done.
func (e *engine) callContext(ctx context.Context) (context.Context, callScope) {
	if ctx.Done() == nil {
		// The caller's ctx never ends: the Locker's own ends the call,
		// and Close needs no registration.
		if ctx == context.Background() {
			return e.background, callScope{}
		}
		return closingContext{Context: ctx, e: e}, callScope{}
	}
	c, cancel := context.WithCancelCause(ctx)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		cancel(ErrClosed)
		return c, callScope{cancel: cancel}
	}
	e.callSeq++
	s := callScope{e: e, id: e.callSeq, cancel: cancel}
	e.inflight[s.id] = cancel
	e.mu.Unlock()
	return c, s
}

// callScope is a call's registration with Close: Close cancels it.
type callScope struct {
	e      *engine
	id     uint64
	cancel context.CancelCauseFunc
}

func (s callScope) end() {
	if s.e != nil {
		s.e.mu.Lock()
		delete(s.e.inflight, s.id)
		s.e.mu.Unlock()
	}
	if s.cancel != nil {
		s.cancel(nil)
	}
}

// closingContext is the call context of a caller whose ctx never ends
// (Done returns nil): it has the caller's values and deadline, and ends
// with the Locker's ctx, which Close cancels with cause ErrClosed.
type closingContext struct {
	context.Context // the caller's
	e               *engine
}

func (c closingContext) Done() <-chan struct{} { return c.e.ctx.Done() }
func (c closingContext) Err() error            { return c.e.ctx.Err() }

// Value is the caller's value for key, else the Locker ctx's: context.Cause
// and the contexts derived from c find the Locker's cancellation there.
func (c closingContext) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.e.ctx.Value(key)
}

// heldIn returns the lock on key that a Do up ctx's call chain holds through
// this engine, passed to Do as this Locker itself or behind a wrapper that
// hands out the engine's own Locks, while that Do's function runs. It
// returns an error when that lock was lost.
func (e *engine) heldIn(ctx context.Context, key string) (Lock, error) {
	return liveHold(ctx, func(en *heldEntry) bool {
		if h, ok := en.lock.(*handle); ok {
			if h.h.shared {
				return false // a permit or a read hold is no lock
			}
			if h.h.e == e && h.h.key == key {
				return true
			}
		}
		return en.key == key && sameLocker(en.locker, e)
	})
}

// waitErr maps the error of an interrupted wait: the Locker closed, the
// caller's ctx ended (the error then also wraps the last store error the
// wait rode out), or the store failed.
func (e *engine) waitErr(op, key string, ctx context.Context, err, last error) error {
	switch {
	case e.isClosed():
		return e.err(op, key, ErrClosed, nil)
	case ctx.Err() != nil:
		if last != nil {
			return e.err(op, key, ErrNotAcquired, join(ctxCause(ctx), fmt.Errorf("last store error: %w", last)))
		}
		return e.err(op, key, ErrNotAcquired, ctxCause(ctx))
	}
	return e.err(op, key, nil, err)
}

// isClosed reports whether Close has begun: a call cut short from then on
// was cut short by Close, even before Close cancels e.ctx.
func (e *engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// permanent reports whether a failed attempt is not worth repeating.
func permanent(err error) bool {
	return errors.Is(err, driver.ErrPermanent) || errors.Is(err, ErrInvalidKey) ||
		errors.Is(err, ErrInvalidOption) || errors.Is(err, ErrClosed)
}

// retryDelay is the pause of a waiting Lock after its attempt number
// attempt failed with a store error, or with a grant that came back late
// and was gone: the Locker's backoff, kept between 10 ms and 2 s, with
// jitter.
func (e *engine) retryDelay(attempt int) time.Duration {
	return driver.Jitter(min(max(e.cfg.backoff(attempt), 10*time.Millisecond), 2*time.Second))
}

// poll is the wait loop for drivers without a queue: [driver.Backoff.Poll]
// with the Locker's backoff, subscribed to the key's releases when the
// driver is a [driver.Notifier]. The grant's Since is the winning attempt's
// send time.
func (e *engine) poll(ctx context.Context, req driver.Request) (driver.Grant, error) {
	try := func(ctx context.Context) (driver.Grant, error) { return e.drv.TryAcquire(ctx, req) }
	return driver.Backoff(e.cfg.backoff).Poll(ctx, try, e.subscriber(req.Key))
}

// subscriber returns the Subscribe of a wait for key: nil without a
// Notifier.
func (e *engine) subscriber(key string) driver.Subscribe {
	if e.notifier == nil {
		return nil
	}
	return func(ctx context.Context) (<-chan struct{}, func(), error) {
		ch, cancel, err := e.notifier.Subscribe(ctx, key)
		if err != nil && ctx.Err() == nil {
			e.cfg.logger.Warn("locker: subscribe failed, polling instead", "backend", e.name, "key", key, "err", err)
		}
		return ch, cancel, err
	}
}

// register records a granted lock so that the watchdog renews it.
func (e *engine) register(h *hold, g driver.Grant, sent time.Time) error {
	h.lease.Token = g.Token
	h.lease.State = g.State
	h.token.Store(g.Token)
	if !g.Since.IsZero() {
		sent = g.Since
	}
	validity := g.Validity
	if validity <= 0 {
		validity = h.lease.TTL
	}
	// MinHold and MaxHold count from the grant's arrival: never before the
	// store's acquisition (a queue-based driver's Since may be older). The
	// observer's events need it too.
	if h.minHold > 0 || h.maxHold > 0 || e.cfg.observer != nil {
		h.acquired = time.Now()
	}
	if now := h.acquired; h.minHold > 0 || h.maxHold > 0 {
		if h.minHold > 0 {
			h.minHoldEnd = now.Add(h.minHold)
		}
		if h.maxHold > 0 {
			h.maxHoldEnd = now.Add(h.maxHold)
		}
	}
	e.mu.Lock()
	if e.closed {
		// Granted as the Locker closed: Close, which waits for this call,
		// releases it with the others.
		e.cleanups = append(e.cleanups, h.cleanupAt(h.minHoldEnd))
		e.mu.Unlock()
		h.end(nil)
		return e.err("lock", h.key, ErrClosed, nil)
	}
	h.setDeadline(sent.Add(safeValidity(validity)))
	h.nextRenew = sent.Add(renewAfter(h.ttl, validity))
	if !h.ended.Load() {
		e.holds[h] = struct{}{}
	}
	// The watchdog wakes at e.next anyway: a hold due after that needs no
	// wake-up, and one due before moves e.next.
	due := h.nextRenew
	if !h.maxHoldEnd.IsZero() {
		due = minTime(due, h.maxHoldEnd)
	}
	poke := due.Before(e.next)
	if poke {
		e.next = due
	}
	e.mu.Unlock()
	if poke {
		e.poke()
	}
	return nil
}

// safeValidity is how long after sending a request the engine still counts on
// it: a tenth less than the store promised, so that Done closes before the
// store's own expiry even with some clock drift and scheduling delay.
func safeValidity(v time.Duration) time.Duration { return v - v/10 - time.Millisecond }

func (e *engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Close implements Locker.
//
// It ends every hold first (their Done channels close at once, whatever the
// store does), cancels the waits and the store calls in progress, stops the
// watchdog, and only then releases the locks in the store, best-effort: all
// of this within one release timeout counted from the call (the driver's
// own Close and the WithOnClose functions come after).
func (e *engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	held := make([]*hold, 0, len(e.holds))
	for h := range e.holds {
		held = append(held, h)
	}
	e.mu.Unlock()
	deadline := time.Now().Add(e.cfg.releaseTimeout)

	// The holds end first: an Unlock cancelled below leaves its release to
	// the watchdog, which may start it at once, and no release may start
	// while a Done is still open.
	var release []cleanup
	for _, h := range held {
		// A hold claimed by an Unlock in progress is ended by that Unlock,
		// whose store call is cancelled below.
		if h.claim() && h.end(e.err("close", h.key, ErrLost, ErrClosed)) {
			release = append(release, h.cleanup())
		}
	}
	// The renewals and cleanups in flight, then the calls, which say
	// ErrClosed (see waitErr).
	e.cancel(ErrClosed)
	e.mu.Lock()
	for _, cancel := range e.inflight {
		cancel(ErrClosed)
	}
	e.mu.Unlock()
	e.calls.Wait()
	close(e.stop)
	e.wg.Wait()

	e.mu.Lock()
	release = append(release, e.cleanups...)
	e.cleanups = nil
	e.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if left := e.runCleanups(ctx, release); len(left) > 0 {
		e.cfg.logger.Warn("locker: Close could not clean up everything; the store expires the rest", "backend", e.name, "left", len(left))
	}
	var derr error
	if cc, ok := e.drv.(driver.ContextCloser); ok {
		derr = cc.CloseContext(ctx)
	} else {
		derr = e.drv.Close()
	}
	errs := []error{derr}
	for _, fn := range e.cfg.onClose {
		errs = append(errs, fn())
	}
	if err := errors.Join(errs...); err != nil {
		return e.err("close", "", nil, err)
	}
	return nil
}

// forEach calls fn for every item with at most n calls at once, and returns
// when all have returned.
func forEach[T any](items []T, n int, fn func(T)) {
	if len(items) <= 1 {
		for _, it := range items {
			fn(it)
		}
		return
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, it := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(it)
		}()
	}
	wg.Wait()
}

// hold is the engine's state for one held lock.
type hold struct {
	e     *engine
	key   string
	lease driver.Lease
	gate  *gateTicket // nil for a shared hold
	// ticket is what gate points to while a Lock holds its place in the
	// key's local gate (a late attempt keeps it after gate is nil), and
	// self the handle Lock returns: allocated with the hold.
	ticket gateTicket
	self   handle
	// done holds the chan struct{} Done returns, made when first asked
	// for, or e.closedDone when the hold ended before that (see doneChan).
	done atomic.Value
	// shared: a semaphore permit or a read or write hold, never reentrant
	shared bool

	// The lock's options (see lockConfig), and the moments its MinHold and
	// MaxHold end (zero: none); set before the hold is registered, and
	// changed by Extend under e.mu.
	ttl                    time.Duration
	minHold, maxHold       time.Duration
	minHoldEnd, maxHoldEnd time.Time
	acquired               time.Time // when the grant arrived

	extending sync.Mutex // held by Extend

	group   atomic.Pointer[MultiLock] // the MultiLock the hold is part of, ended with it
	token   atomic.Uint64             // the fencing token, for the loss report
	claimed atomic.Bool               // set by the one Unlock or Close that releases it
	ended   atomic.Bool               // set once, just before done is closed or set
	err     atomic.Pointer[error]

	// due is when the hold must end, the earlier of deadline and
	// maxHoldEnd, in nanoseconds of the monotonic clock since e.born (0:
	// not registered yet): Done and Err read it without e.mu.
	due atomic.Int64

	// guarded by e.mu
	deadline  time.Time
	nextRenew time.Time
	renewing  bool
	renewErr  error // of the last renewal, when it failed with an unknown outcome
}

func (h *hold) claim() bool { return h.claimed.CompareAndSwap(false, true) }

// claimHeld claims h for the one Unlock that releases it, and reports
// whether it did while the lock was still held. Past its local deadline or
// its MaxHold end the lock is no longer held, whatever the store would
// answer: it is ended first, as the watchdog (which may run late) would
// end it, with the same error, and its store copy is released in the
// background (see overdue).
func (h *hold) claimHeld() bool {
	h.overdue()
	return h.claim() && !h.ended.Load()
}

// release gives the lock up in the store, or keeps its key claimed for
// the rest of its MinHold.
func (h *hold) release(ctx context.Context) error { return h.e.giveUp(ctx, h.lease, h.keepUntil()) }

// cleanup is the background release of the hold's lease.
func (h *hold) cleanup() cleanup { return h.cleanupAt(h.keepUntil()) }

// cleanupAt is cleanup with the MinHold end given (e.mu may be held).
func (h *hold) cleanupAt(keepUntil time.Time) cleanup {
	return cleanup{key: h.lease.Key, lease: &h.lease, keepUntil: keepUntil}
}

// keepUntil is the end of the hold's MinHold, which Extend may move.
func (h *hold) keepUntil() time.Time {
	h.e.mu.Lock()
	defer h.e.mu.Unlock()
	return h.minHoldEnd
}

// end marks the lock as no longer held: err is nil after a release, and an
// error matching ErrLost otherwise. Only the first call has an effect.
func (h *hold) end(err error) bool {
	if !h.ended.CompareAndSwap(false, true) {
		return false
	}
	if err != nil {
		lost := err // only a loss moves to the heap
		h.err.Store(&lost)
	}
	h.e.mu.Lock()
	delete(h.e.holds, h)
	h.e.mu.Unlock()
	h.gate.leave()
	h.closeDone()
	if m := h.group.Load(); m != nil {
		m.end()
	}
	if err != nil && h.e.cfg.observer != nil {
		h.e.observe(Event{Kind: EventLost, Key: h.key, Token: h.token.Load(), Start: h.acquired, Wait: time.Since(h.acquired), Err: err})
	}
	return true
}

// lost ends the hold as lost (it is also the driver.Request.Lost callback)
// and reports whether this call ended it. A hold that an Unlock or Close
// has claimed is ended without a loss: the store losing a lock that is
// being released is no loss, and the release's outcome says the rest.
func (h *hold) lost(cause error) bool {
	if h.claimed.Load() {
		h.end(nil)
		return false
	}
	if !h.end(h.e.err("hold", h.key, ErrLost, cause)) {
		return false
	}
	// The driver may report the loss before register has filled in the
	// lease: the token is read from its own atomic.
	h.e.cfg.logger.Warn("locker: lock lost", "backend", h.e.name, "key", h.key, "token", h.token.Load(), "err", cause)
	return true
}

// driverLost is the driver.Request.Lost callback: lost, unless the lock
// is past its local deadline or its MaxHold end. Then it was lost there,
// whatever the driver learnt since (a stalled process whose driver ran
// before the watchdog), and ends as the watchdog would have ended it.
func (h *hold) driverLost(cause error) {
	h.overdue()
	h.lost(cause)
}

// handle is the Lock the engine hands out.
type handle struct{ h *hold }

func (l *handle) Key() string   { return l.h.key }
func (l *handle) Token() uint64 { return l.h.lease.Token }

// Done implements Lock. Past the lock's deadline it is closed when it
// returns, even when the watchdog is late (see hold.overdue).
func (l *handle) Done() <-chan struct{} {
	l.h.overdue()
	return l.h.doneChan()
}

// doneChan returns the hold's done channel, made on the first call: most
// holds end unasked, and then cost no channel. Concurrent calls return the
// same channel: the first store wins, as in closeDone.
func (h *hold) doneChan() chan struct{} {
	if d := h.done.Load(); d != nil {
		return d.(chan struct{})
	}
	d := make(chan struct{})
	if h.done.CompareAndSwap(nil, d) {
		return d
	}
	return h.done.Load().(chan struct{})
}

// closeDone closes the channel doneChan made, or, when none was asked for
// yet, stores the engine's closed channel in its place, so that every
// later doneChan returns a closed channel. end calls it once.
func (h *hold) closeDone() {
	if !h.done.CompareAndSwap(nil, h.e.closedDone) {
		close(h.done.Load().(chan struct{}))
	}
}

// closedChan returns a channel that is closed already.
func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Deadline implements Lock.
// It is at most the lock's MaxHold end.
func (l *handle) Deadline() time.Time { return l.h.publicDeadline() }

// Err implements Lock; like Done, it ends an overdue hold first.
func (l *handle) Err() error {
	l.h.overdue()
	if p := l.h.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Unlock implements Lock. With a nil or ended ctx it still releases: in the
// background, at once (gocron, for one, unlocks with its job's ctx at
// shutdown), and its error says so.
func (l *handle) Unlock(ctx context.Context) error {
	err := l.unlock(ctx)
	l.observeRelease(ctx, err)
	return err
}

// observeRelease reports the release event of an Unlock that returned err.
func (l *handle) observeRelease(ctx context.Context, err error) {
	if e := l.h.e; e.cfg.observer != nil {
		e.observe(Event{Kind: EventRelease, Ctx: ctx, Key: l.h.key, Token: l.h.token.Load(), Start: l.h.acquired, Wait: time.Since(l.h.acquired), Err: err})
	}
}

func (l *handle) unlock(ctx context.Context) error {
	h, e := l.h, l.h.e
	if !e.enter() {
		return e.err("unlock", h.key, ErrNotHeld, ErrClosed)
	}
	defer e.calls.Done()
	if !h.claimHeld() {
		return e.err("unlock", h.key, ErrNotHeld, l.Err())
	}
	if ctx == nil || ctx.Err() != nil {
		return h.releaseLater(ctx)
	}
	cctx, scope := e.callContext(ctx)
	defer scope.end()
	if e.inlineFor(ctx) {
		// No closures to allocate: detached would run it inline too.
		return h.released(cctx, h.release(cctx), false)
	}
	_, err, gone := detachedWith(e, &e.releaseCalls, true, ctx, cctx, releaseArgs.run, releaseArgs{h: h, ctx: cctx}, func() func(struct{}, error) {
		return func(_ struct{}, err error) { h.lateRelease(err) }
	})
	return h.released(cctx, err, gone)
}

// releaseLater ends a claimed hold whose Unlock got a nil or ended ctx:
// the store release is left to the watchdog.
func (h *hold) releaseLater(ctx context.Context) error {
	e := h.e
	h.end(nil)
	e.abandon(h)
	if ctx == nil {
		return e.err("unlock", h.key, ErrInvalidOption, fmt.Errorf("%w; the lock is released in the background", errNilContext))
	}
	return e.err("unlock", h.key, nil, fmt.Errorf("%w; the lock is released in the background", ctxCause(ctx)))
}

// released ends a claimed hold after its store release returned err, or
// went on in the background (gone), and returns Unlock's error.
func (h *hold) released(cctx context.Context, err error, gone bool) error {
	e := h.e
	if gone {
		// The release goes on in the background; it queues a retry if it
		// fails (lateRelease).
		h.end(nil)
		return e.err("unlock", h.key, nil, fmt.Errorf("%w; the lock is released in the background", ctxCause(cctx)))
	}
	if err == nil {
		h.end(nil)
		return nil
	}
	if errors.Is(err, driver.ErrNotHeld) {
		// Past its local deadline the lock was lost at that deadline,
		// whatever the store's answer says (its TTL ran out, most
		// likely): Unlock reports what the watchdog would have.
		e.mu.Lock()
		expired, lastErr := !time.Now().Before(h.deadline), h.renewErr
		e.mu.Unlock()
		if expired {
			loss := e.err("hold", h.key, ErrLost, noRenewal(lastErr))
			h.end(loss)
			return e.err("unlock", h.key, ErrNotHeld, loss)
		}
		h.end(e.err("unlock", h.key, ErrLost, err))
		return e.err("unlock", h.key, ErrNotHeld, err)
	}
	// Unknown outcome: stop renewing, and let the watchdog retry the
	// release in the background.
	h.end(nil)
	e.abandon(h)
	return e.err("unlock", h.key, nil, err)
}

// lateRelease queues a retry of a background release that failed with an
// unknown outcome.
func (h *hold) lateRelease(err error) {
	if err != nil && !errors.Is(err, driver.ErrNotHeld) {
		h.e.abandon(h)
	}
}

// errHeldLocally is the cause of ErrNotAcquired when another goroutine of the
// same Locker holds or is acquiring the key.
var errHeldLocally = errors.New("held or being acquired by another caller of this Locker")

// gate is a local queue for one store key: at most one goroutine of a Locker
// contends for (or holds) a key at a time, so a release wakes one waiter per
// Locker instead of all of them.
type gate struct {
	ch   chan struct{}
	refs int
}

// gateTicket is a place in a gate, given back exactly once.
type gateTicket struct {
	e    *engine
	key  string
	g    *gate
	once sync.Once
}

// enterGate takes a place in the local gate of store key: at once, or
// (wait) once the place before it is given back, or ctx ends. The error is
// errHeldLocally when !wait and the gate is taken.
func (e *engine) enterGate(ctx context.Context, key string, wait bool) (*gateTicket, error) {
	return e.enterGateWith(ctx, key, wait, &gateTicket{})
}

// enterGateWith is enterGate with the ticket t, unused, to fill in and
// return.
func (e *engine) enterGateWith(ctx context.Context, key string, wait bool, t *gateTicket) (*gateTicket, error) {
	e.mu.Lock()
	g := e.gates[key]
	if g == nil {
		if n := len(e.spareGates); n > 0 {
			g = e.spareGates[n-1]
			e.spareGates[n-1] = nil
			e.spareGates = e.spareGates[:n-1]
		} else {
			g = &gate{ch: make(chan struct{}, 1)}
		}
		e.gates[key] = g
	}
	g.refs++
	e.mu.Unlock()
	t.e, t.key, t.g = e, key, g
	select {
	case g.ch <- struct{}{}:
		return t, nil
	default:
	}
	if !wait {
		e.dropGate(key, g)
		return nil, errHeldLocally
	}
	select {
	case g.ch <- struct{}{}:
		return t, nil
	case <-ctx.Done():
		e.dropGate(key, g)
		return nil, ctx.Err()
	}
}

func (t *gateTicket) leave() {
	if t == nil {
		return // a shared hold has no gate
	}
	t.once.Do(func() {
		<-t.g.ch
		t.e.dropGate(t.key, t.g)
	})
}

// maxSpareGates is the most gates an engine keeps for reuse: those of a
// set of keys of a usual LockMulti.
const maxSpareGates = 4

func (e *engine) dropGate(key string, g *gate) {
	e.mu.Lock()
	g.refs--
	if g.refs == 0 {
		delete(e.gates, key)
		if len(e.spareGates) < maxSpareGates {
			e.spareGates = append(e.spareGates, g) // empty: its last ticket has left
		}
	}
	e.mu.Unlock()
}
