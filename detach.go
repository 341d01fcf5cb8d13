package locker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golocker/locker/driver"
)

// The store calls of Lock, TryLock, Unlock, Inspect, List, Extend,
// SetData and the operators' calls are detached from their caller when the
// caller's ctx ends: the caller returns at once, whatever
// the driver does, and the call goes on in the background. A driver that
// honours ctx ends it soon after; one that must finish something first (a
// session to set up, an attempt to undo) finishes it there. A driver that
// promises to return promptly (driver.Info.PromptCancel) has its calls
// made inline, in the caller's goroutine, which costs no goroutine. So has
// a call whose caller's ctx can never end (ctx.Done() returns nil, as for
// context.Background()): that caller waits for the call anyway. Close
// cancels such a call's ctx as it does any other's, and waits for it.
// Extend's renewal is made inline only for such a caller: PromptCancel does
// not cover renewals (see driver.Info), which a driver may bound by their
// deadline alone.
//
// A detached call runs in one of the engine's workers: a goroutine that
// waits for the next call once it is done, so that a Locker in use does
// not start a goroutine, and grow its stack, for every store call.

// Outcomes of a detached call, decided once by compare-and-swap.
const (
	callRunning int32 = iota
	callDelivered
	callAbandoned
)

// detached runs call and returns its outcome, or ctx.Err() as soon as ctx
// ends (gone is then true). A call still running then goes on in its
// worker, counted in e.calls so that Close waits for it, and hands its
// outcome to the function late returns instead (nothing when late is nil).
// late is called only then, in the caller's goroutine before detached
// returns, so that a call that ends in time builds no such function. The caller must hold e.calls (see enter).
// ctx is the call's own ctx (see callContext), caller the ctx its caller
// passed. When e.inlineFor(caller), call runs inline and gone is always
// false.
func detached[T any](e *engine, caller, ctx context.Context, call func() (T, error), late func() func(T, error)) (v T, err error, gone bool) {
	return detachedWith(e, nil, !e.inlineFor(caller), caller, ctx, callFunc[T], call, late)
}

// detachedIf is detached, with call run inline unless detach is set.
func detachedIf[T any](e *engine, detach bool, caller, ctx context.Context, call func() (T, error), late func() func(T, error)) (v T, err error, gone bool) {
	return detachedWith(e, nil, detach, caller, ctx, callFunc[T], call, late)
}

// callFunc calls f: the fn of detachedWith for a closure.
func callFunc[T any](f func() (T, error)) (T, error) { return f() }

// detachedWith is detachedIf for the call fn(arg), whose bookkeeping comes
// from pool and goes back to it unless the call is left running (a nil
// pool allocates it): with a fn that is no closure, a Locker in use
// allocates nothing per detached call.
// It waits on caller and on the Locker's ctx rather than on ctx, which ends
// when one of them does (see callContext): a ctx whose Done is never asked
// for makes no channel. Once one has ended it waits for ctx too, which ends
// at once after it, so that the caller sees ctx ended.
func detachedWith[A, T any](e *engine, pool *callPool[A, T], detach bool, caller, ctx context.Context, fn func(A) (T, error), arg A, late func() func(T, error)) (v T, err error, gone bool) {
	if !detach {
		v, err = fn(arg)
		return v, err, false
	}
	c := pool.get(e)
	c.fn, c.arg = fn, arg
	e.calls.Add(1)
	e.run(c)
	select {
	case <-c.done:
		return pool.put(c)
	case <-caller.Done():
	case <-e.ctx.Done():
	}
	select {
	case <-c.done:
		return pool.put(c)
	case <-ctx.Done():
		// late is built only now, before the swap that hands it to the
		// worker: the worker reads c.late only after the swap fails.
		if late != nil {
			c.late = late()
		}
		if c.state.CompareAndSwap(callRunning, callAbandoned) {
			// The worker keeps c: it never goes back to the pool.
			return v, ctx.Err(), true
		}
		<-c.done // delivered just now
		return pool.put(c)
	}
}

// inlineFor reports whether the store calls of a caller that passed ctx run
// inline: the driver promises PromptCancel, or ctx can never end.
func (e *engine) inlineFor(ctx context.Context) bool { return e.inline || ctx.Done() == nil }

// read runs call, a store call of Inspect or List, as detached runs
// Lock's: with the ctx of a call that entered (see callContext), returning
// when ctx ends or the Locker closes, whatever the store does. Its error is
// op's on key: ErrClosed once the Locker has closed, ctx's cause once ctx
// has ended, else call's.
func read[T any](e *engine, op, key string, ctx context.Context, call func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if !e.enter() {
		return zero, e.err(op, key, ErrClosed, nil)
	}
	defer e.calls.Done()
	cctx, scope := e.callContext(ctx)
	defer scope.end()
	v, err, gone := detached(e, ctx, cctx, func() (T, error) { return call(cctx) }, nil)
	switch {
	case (gone || err != nil) && e.isClosed():
		return zero, e.err(op, key, ErrClosed, nil)
	case gone, err != nil && ctx.Err() != nil:
		return zero, e.err(op, key, nil, ctxCause(ctx))
	case err != nil:
		return zero, e.err(op, key, nil, err)
	}
	return v, nil
}

// detachedCall is one call of detachedWith, run by a worker.
type detachedCall[A, T any] struct {
	e     *engine
	fn    func(A) (T, error)
	arg   A
	late  func(T, error) // nil: nothing to do with a late outcome
	state atomic.Int32   // callRunning, then one of the others
	// done gets one value once v and err are delivered: a buffered
	// channel that the caller empties, so that c can be used again.
	done chan struct{}
	v    T
	err  error
}

func (c *detachedCall[A, T]) run() {
	// Once delivered, c belongs to its caller again, which may reuse it
	// at once: the worker reads nothing of it after the send.
	e := c.e
	defer e.calls.Done()
	v, err := c.fn(c.arg)
	if c.state.CompareAndSwap(callRunning, callDelivered) {
		c.v, c.err = v, err
		c.done <- struct{}{}
		return
	}
	if c.late != nil {
		c.late(v, err)
	}
}

// callPool keeps the detachedCalls of one kind whose outcome was
// delivered, for the next calls: a Locker in use then allocates neither a
// call nor its channel per store call. A nil *callPool allocates each.
type callPool[A, T any] struct{ p sync.Pool }

// get returns an unused call of e.
func (p *callPool[A, T]) get(e *engine) *detachedCall[A, T] {
	if p != nil {
		if c, ok := p.p.Get().(*detachedCall[A, T]); ok {
			return c
		}
	}
	return &detachedCall[A, T]{e: e, done: make(chan struct{}, 1)}
}

// put returns c's delivered outcome, and c, emptied, to p.
func (p *callPool[A, T]) put(c *detachedCall[A, T]) (v T, err error, gone bool) {
	v, err = c.v, c.err
	if p != nil {
		var (
			noArg A
			noV   T
		)
		c.fn, c.arg, c.late, c.v, c.err = nil, noArg, nil, noV, nil
		c.state.Store(callRunning)
		p.p.Put(c)
	}
	return v, err, false
}

// job is a call a worker runs.
type job interface{ run() }

// workerIdle is how long a worker waits for another call before it exits.
const workerIdle = 2 * time.Second

// run runs j in a worker of e: an idle one when there is one, else a new
// one. The caller must hold e.calls (see enter), so that Close, which stops
// the workers after e.calls, never waits for a worker started meanwhile.
func (e *engine) run(j job) {
	select {
	case e.work <- j:
		return
	default:
	}
	e.wg.Add(1)
	go e.worker(j)
}

// worker runs j, then the jobs handed to it on e.work, until it has waited
// workerIdle for one or Close stops it.
func (e *engine) worker(j job) {
	defer e.wg.Done()
	var idle *time.Timer
	for {
		j.run()
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle) // Go 1.23+: drops a pending tick
		}
		select {
		case j = <-e.work:
		case <-idle.C:
			return
		case <-e.stop:
			idle.Stop()
			return
		}
	}
}

// tryOutcome is the outcome of one acquisition attempt.
type tryOutcome struct {
	grant driver.Grant
	sent  time.Time
}

// lateAttempt deals with the outcome of an acquisition attempt whose caller
// has returned: a grant is released in the background, and whatever a
// failure left in the store is cleaned up. The attempt keeps its caller's
// place in the key's local gate until it ends (t, nil for a shared hold), so
// that the Locker's next attempt on the key comes after it: after its
// waiter entry is gone, behind the waiters that came meanwhile.
func (e *engine) lateAttempt(req driver.Request, t *gateTicket) func(tryOutcome, error) {
	return func(a tryOutcome, err error) {
		defer t.leave()
		if err != nil {
			e.keepResidue(req.Key, err)
			return
		}
		lease := driver.Lease{Key: req.Key, Owner: req.Owner, TTL: req.TTL, Token: a.grant.Token, State: a.grant.State}
		e.addCleanup(cleanup{key: req.Key, lease: &lease})
	}
}
