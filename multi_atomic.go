package locker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golocker/locker/driver"
)

// multiTaker is implemented by Lockers that can take several keys in one
// store operation: the engine over a [driver.MultiAcquirer].
type multiTaker interface {
	// tryMulti makes one all-or-nothing attempt on keys (distinct, in
	// byte order). fallback reports that it took nothing and that the
	// caller should take the keys one by one instead: the driver cannot
	// take them together, the keys carry data (WithData), a key is held
	// up ctx's call chain (a nested hold), or, when wait is set, the attempt failed in a way a waiting
	// LockMulti rides out (a key held, a store error).
	tryMulti(ctx context.Context, op string, keys []string, wait bool, opts []LockOption) (locks []Lock, fallback bool, err error)
}

// multiOutcome is the outcome of one TryAcquireMulti call.
type multiOutcome struct {
	grants []driver.Grant
	sent   time.Time
}

func (e *engine) tryMulti(ctx context.Context, op string, keys []string, wait bool, opts []LockOption) (locks []Lock, fallback bool, err error) {
	ma, ok := e.drv.(driver.MultiAcquirer)
	if !ok {
		return nil, true, nil
	}
	if ctx.Err() != nil {
		return nil, false, e.err(op, keys[0], ErrNotAcquired, ctxCause(ctx))
	}
	skeys := make([]string, len(keys))
	for i, k := range keys {
		if skeys[i], err = e.storeKey(op, k); err != nil {
			return nil, false, err
		}
		if outer, err := e.heldIn(ctx, k); err != nil || outer != nil {
			return nil, true, nil // the ordered path nests or reports it
		}
	}
	lc, err := e.lockOptions(opts)
	if err != nil {
		return nil, false, e.err(op, keys[0], nil, err)
	}
	if lc.data != nil {
		return nil, true, nil // the one-operation takes carry no data
	}
	if !e.enter() {
		return nil, false, e.err(op, keys[0], ErrClosed, nil)
	}
	defer e.calls.Done()
	cctx, scope := e.callContext(ctx)
	defer scope.end()

	// The holds in one allocation, each with its gate ticket and handle
	// (hold.ticket, hold.self): a set costs few allocations per key.
	holds := make([]hold, len(keys))
	for i, k := range keys {
		h := &holds[i]
		g, err := e.enterGateWith(cctx, skeys[i], false, &h.ticket)
		if err != nil {
			// Another caller of this Locker holds or takes the key.
			leaveGates(holds[:i])
			if wait {
				return nil, true, nil
			}
			return nil, false, e.err(op, k, ErrNotAcquired, err)
		}
		h.e, h.key, h.gate, h.ttl, h.minHold, h.maxHold = e, k, g, lc.ttl, lc.minHold, lc.maxHold
		h.self.h = h
	}
	reqs := make([]driver.Request, len(keys))
	for i := range holds {
		h := &holds[i]
		reqs[i] = driver.Request{Key: skeys[i], Label: e.cfg.label, TTL: lc.ttl, Lost: h.driverLost}
		if e.perLockTTL {
			reqs[i].TTL = max(lc.ttl, lc.minHold)
		}
	}
	setOwners(reqs)
	start := time.Now()
	var (
		a    multiOutcome
		gone bool
	)
	if e.inlineFor(ctx) {
		// No closures to allocate: detached would run it inline too.
		a, err = e.takeMulti(cctx, ma, reqs, skeys, wait, lc.ttl)
	} else {
		hs := holds // not captured by reference: holds stays on the stack
		at := takeMultiArgs{e: e, ctx: cctx, ma: ma, reqs: reqs, skeys: skeys, wait: wait, ttl: lc.ttl}
		a, err, gone = detachedWith(e, &e.multiCalls, true, ctx, cctx, takeMultiArgs.run, at,
			func() func(multiOutcome, error) {
				return func(a multiOutcome, err error) {
					// The caller has returned: give back what the attempt took.
					defer leaveGates(hs)
					if err != nil {
						e.keepResidue(reqs[0].Key, err)
						return
					}
					for i, g := range a.grants {
						lease := driver.Lease{Key: reqs[i].Key, Owner: reqs[i].Owner, TTL: reqs[i].TTL, Token: g.Token, State: g.State}
						e.addCleanup(cleanup{key: lease.Key, lease: &lease})
					}
				}
			})
	}
	if gone {
		for i := range holds {
			holds[i].claim() // a loss the late attempt reports is nobody's
		}
		return nil, false, e.waitErr(op, keys[0], ctx, err, nil)
	}
	if err == nil && len(a.grants) != len(reqs) {
		// A broken driver: release what it says it took.
		for i := range min(len(a.grants), len(reqs)) {
			lease := driver.Lease{Key: reqs[i].Key, Owner: reqs[i].Owner, TTL: reqs[i].TTL, Token: a.grants[i].Token, State: a.grants[i].State}
			e.addCleanup(cleanup{key: lease.Key, lease: &lease})
		}
		err = errMultiGrants
	}
	if err != nil {
		leaveGates(holds)
		e.keepResidue(reqs[0].Key, err)
		switch {
		case errors.Is(err, driver.ErrNotAtomic):
			return nil, true, nil
		case errors.Is(err, driver.ErrConflict):
			err = e.err(op, keys[0], ErrInvalidOption, err)
		case wait && cctx.Err() != nil:
			err = e.waitErr(op, keys[0], ctx, cctx.Err(), nil)
		case wait && !permanent(err):
			return nil, true, nil // the ordered path waits
		case errors.Is(err, driver.ErrHeld):
			err = e.err(op, keys[0], ErrNotAcquired, err)
		default:
			err = e.waitErr(op, keys[0], ctx, err, nil)
		}
		e.observeMulti(ctx, keys, start, wait, nil, err)
		return nil, false, err
	}
	locks = make([]Lock, len(holds))
	var regErr error
	for i := range holds {
		h := &holds[i]
		h.lease = driver.Lease{Key: reqs[i].Key, Owner: reqs[i].Owner, TTL: reqs[i].TTL}
		if err := e.register(h, a.grants[i], a.sent); err != nil && regErr == nil {
			regErr = err // closed: Close releases them all
		}
		locks[i] = &h.self
	}
	if regErr != nil {
		return nil, false, regErr
	}
	e.observeMulti(ctx, keys, start, wait, locks, nil)
	return locks, false, nil
}

// takeMultiArgs is the arguments of one detached takeMulti of tryMulti.
type takeMultiArgs struct {
	e     *engine
	ctx   context.Context
	ma    driver.MultiAcquirer
	reqs  []driver.Request
	skeys []string
	wait  bool
	ttl   time.Duration
}

func (a takeMultiArgs) run() (multiOutcome, error) {
	return a.e.takeMulti(a.ctx, a.ma, a.reqs, a.skeys, a.wait, a.ttl)
}

// leaveGates gives back the local gates of holds.
func leaveGates(holds []hold) {
	for i := range holds {
		holds[i].gate.leave()
	}
}

// ownerLen is the length of an owner from setOwners: rand.Text's, 130
// random bits.
const ownerLen = 26

// setOwners gives each request of reqs a random owner, as rand.Text would,
// carved from one string: one allocation for a set of keys.
func setOwners(reqs []driver.Request) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567" // base32, as rand.Text's
	var b strings.Builder
	b.Grow(len(reqs) * ownerLen)
	var r [ownerLen]byte
	for range reqs {
		_, _ = rand.Read(r[:]) // never fails (crypto/rand)
		for i, c := range r {
			r[i] = alphabet[c%32]
		}
		b.Write(r[:])
	}
	s := b.String()
	for i := range reqs {
		reqs[i].Owner = s[i*ownerLen : (i+1)*ownerLen]
	}
}

// takeMulti takes reqs (on the store keys skeys) in one operation of ma:
// once, or, when wait is set, again while a key is held, holding nothing,
// for one TTL at most, woken when a key may be free (the driver's
// AcquireMulti, or multiWait); then the caller takes the keys one by one.
func (e *engine) takeMulti(ctx context.Context, ma driver.MultiAcquirer, reqs []driver.Request, skeys []string, wait bool, ttl time.Duration) (a multiOutcome, err error) {
	until := time.Now().Add(ttl)
	if mw, ok := ma.(driver.MultiWaiter); ok && wait {
		uctx, cancel := context.WithDeadline(ctx, until)
		defer cancel()
		a.sent = time.Now()
		a.grants, err = mw.AcquireMulti(uctx, reqs)
		return e.confirmLateMulti(ctx, reqs, a, err)
	}
	w := multiWait{e: e, keys: skeys}
	defer w.close()
	for attempt := 0; ; attempt++ {
		a.sent = time.Now()
		a.grants, err = ma.TryAcquireMulti(ctx, reqs)
		if !wait || !errors.Is(err, driver.ErrHeld) {
			return e.confirmLateMulti(ctx, reqs, a, err)
		}
		e.keepResidue(reqs[0].Key, err)
		if !w.pause(ctx, attempt, err, until) {
			return a, err
		}
		setOwners(reqs)
	}
}

// confirmLateMulti is confirmLate for the grants of one multi-key
// operation: when any came back past its validity, all are renewed, in one
// batch where the driver batches, and return with the renewals' validity.
// When a renewal fails, every grant is cleaned up in the background, and
// the error matches driver.ErrHeld (a key the store no longer held for
// the caller: the operation took nothing) or wraps the renewal's error.
func (e *engine) confirmLateMulti(ctx context.Context, reqs []driver.Request, a multiOutcome, err error) (multiOutcome, error) {
	if err != nil || len(a.grants) != len(reqs) {
		return a, err
	}
	now := time.Now()
	late := false
	for i, g := range a.grants {
		since, validity := a.sent, g.Validity
		if !g.Since.IsZero() {
			since = g.Since
		}
		if validity <= 0 {
			validity = reqs[i].TTL
		}
		late = late || !now.Before(since.Add(safeValidity(validity)))
	}
	if !late {
		return a, nil
	}
	leases := make([]driver.Lease, len(reqs))
	for i, g := range a.grants {
		leases[i] = driver.Lease{Key: reqs[i].Key, Owner: reqs[i].Owner, TTL: reqs[i].TTL, Token: g.Token, State: g.State}
	}
	sent := time.Now()
	v, errs, err := e.renewLeases(ctx, leases)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err == nil {
		a.sent = sent
		for i := range a.grants {
			a.grants[i].Since, a.grants[i].Validity = sent, v[i]
		}
		return a, nil
	}
	for i := range leases {
		e.addCleanup(cleanup{key: leases[i].Key, lease: &leases[i]})
	}
	a.grants = nil
	if errors.Is(err, driver.ErrNotHeld) {
		return a, fmt.Errorf("%w: %w: %w", errGrantedLate, driver.ErrHeld, err)
	}
	return a, fmt.Errorf("confirming grants that came back past their validity: %w", err)
}

// errMultiGrants is the error of a driver whose TryAcquireMulti returned
// a number of grants other than the number of requests.
var errMultiGrants = errors.New("driver returned a grant count other than the key count")

// observeMulti reports one acquisition event per key of an atomic attempt.
func (e *engine) observeMulti(ctx context.Context, keys []string, start time.Time, wait bool, locks []Lock, err error) {
	if e.cfg.observer == nil {
		return
	}
	for i, k := range keys {
		ev := Event{Kind: EventAcquire, Ctx: ctx, Key: k, Start: start, Wait: time.Since(start), Try: !wait, Err: err}
		if locks != nil {
			ev.Token = locks[i].Token()
		}
		e.observe(ev)
	}
}
