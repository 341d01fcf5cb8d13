package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golocker/locker/driver"
)

// fanout runs call on the masters of on (every master when on is nil) at
// once, each with base (bounded by RedlockConfig.Timeout when set), and
// returns their results in master order: when all have answered, when
// settled (not nil) says, from the answers so far (answered[i] tells
// which), that the others cannot change the outcome. When ctx ends first,
// the requests are cancelled and awaited (for up to cleanupTimeout: one
// already sent may still take effect, and the caller must know to undo
// it). A master left out by on is reported as errNotAsked. The requests
// still running then are reported as errPending (with ctx's error if it
// ended) and finish in the background, as base allows (Close cancels the
// driver's own contexts and waits for them), handing their result to late
// when it is not nil.
func fanout[R any](ctx context.Context, d *redlockDriver, on []bool, base context.Context,
	call func(ctx context.Context, m Master) (R, error),
	settled func(answered []bool, rs []R, errs []error) bool,
	late func(i int, r R, err error),
) ([]R, []error) {
	n := len(d.masters)
	rs, errs, answered := make([]R, n), make([]error, n), make([]bool, n)
	type answer struct {
		i   int
		r   R
		err error
	}
	ch := make(chan answer, n)
	var mu sync.Mutex
	gone := false // the caller no longer reads ch
	// rctx ends the requests when ctx ends first, or once all returned
	// (in the background, maybe after fanout returned: hence a field,
	// which vet's lostcancel does not track).
	var end struct{ cancel context.CancelFunc }
	var rctx context.Context
	rctx, end.cancel = context.WithCancel(base)
	for i := range d.masters {
		if on != nil && !on[i] {
			answered[i], errs[i] = true, errNotAsked
		}
	}
	var left atomic.Int32
	for _, a := range answered {
		if !a {
			left.Add(1)
		}
	}
	sent := 0
	for i, m := range d.masters {
		if answered[i] {
			continue
		}
		sent++
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			cctx, cancel := rctx, context.CancelFunc(func() {})
			if d.timeout > 0 {
				cctx, cancel = context.WithTimeout(rctx, d.timeout)
			}
			r, err := call(cctx, m)
			cancel()
			if left.Add(-1) == 0 {
				end.cancel()
			}
			mu.Lock()
			if !gone {
				ch <- answer{i, r, err}
				mu.Unlock()
				return
			}
			mu.Unlock()
			if late != nil {
				late(i, r, err)
			}
		}()
	}
	if sent == 0 {
		end.cancel()
	}
	record := func(a answer) { rs[a.i], errs[a.i], answered[a.i] = a.r, a.err, true }
	done := ctx.Done()
	var giveUp <-chan time.Time
wait:
	for got := 0; got < sent; {
		select {
		case a := <-ch:
			got++
			record(a)
			if settled != nil && got < sent && settled(answered, rs, errs) {
				break wait
			}
		case <-done:
			end.cancel()
			done = nil
			t := time.NewTimer(cleanupTimeout)
			defer t.Stop()
			giveUp = t.C
		case <-giveUp:
			break wait
		}
	}
	mu.Lock()
	gone = true
	mu.Unlock()
	for drained := false; !drained; {
		select {
		case a := <-ch:
			record(a)
		default:
			drained = true
		}
	}
	for i, ok := range answered {
		if !ok {
			errs[i] = errPending
			if ctx.Err() != nil {
				errs[i] = fmt.Errorf("%w: %w", errPending, ctx.Err())
			}
		}
	}
	return rs, errs
}

// errPending marks a master that had not answered when the outcome was
// settled without it.
var errPending = errors.New("no answer yet")

// byQuorum returns the settled function of fanout for a request that
// succeeds on a master when good says so: settled once a quorum succeeded
// or so many failed that no quorum can.
func byQuorum[R any](d *redlockDriver, good func(r R) bool) func([]bool, []R, []error) bool {
	return func(answered []bool, rs []R, errs []error) bool {
		ok, bad := 0, 0
		for i, a := range answered {
			switch {
			case !a:
			case errs[i] == nil && good(rs[i]):
				ok++
			default:
				bad++
			}
		}
		return ok >= d.quorum || bad > len(answered)-d.quorum
	}
}

func isOne(n int64) bool { return n == 1 }

// tally is the outcome of one operation on every master: ok masters did
// it, not said for certain it was not ours (or held by another), errs
// holds the failures of the rest.
type tally struct {
	ok, not int
	errs    []error
}

func (d *redlockDriver) count(oks []bool, errs []error) tally {
	var t tally
	for i, err := range errs {
		switch {
		case err != nil:
			t.errs = append(t.errs, fmt.Errorf("master %d: %w", i, err))
		case oks[i]:
			t.ok++
		default:
			t.not++
		}
	}
	return t
}

// failure is the error of an operation that reached no quorum for want of
// answers: permanent when so many masters refuse for good that no quorum
// can ever be reached.
func (d *redlockDriver) failure(op string, t tally) error {
	permanent := 0
	for _, err := range t.errs {
		if errors.Is(classify(err), driver.ErrPermanent) {
			permanent++
		}
	}
	err := fmt.Errorf("%s: %d of %d masters answered, %d needed: %w", op, t.ok+t.not, len(d.masters), d.quorum, errors.Join(t.errs...))
	if permanent > len(d.masters)-d.quorum {
		return driver.Permanent(err)
	}
	return err
}

// result is what one outcome means: nil when a quorum did it, ErrNotHeld
// when no quorum can have it, else the failure.
func (d *redlockDriver) result(op string, t tally) error {
	switch {
	case t.ok >= d.quorum:
		return nil
	case t.not > len(d.masters)-d.quorum:
		return fmt.Errorf("%s: %w", op, driver.ErrNotHeld)
	}
	return d.failure(op, t)
}

// errNotAsked marks a master a phase left out (it did not grant phase 1).
var errNotAsked = errors.New("not part of the quorum")

// detached returns the base context of requests that must not end with
// their caller's ctx once their step is settled (the other masters'
// deletes and renewals still count): it ends with Close, or after
// cleanupTimeout.
func (d *redlockDriver) detached() context.Context {
	ctx, cancel := context.WithTimeout(d.life, cleanupTimeout)
	context.AfterFunc(ctx, cancel)
	return ctx
}

// only returns the on argument of fanout for master i alone.
func (d *redlockDriver) only(i int) []bool {
	on := make([]bool, len(d.masters))
	on[i] = true
	return on
}

// ones reports which replies are 1.
func ones(ns []int64) []bool {
	oks := make([]bool, len(ns))
	for i, n := range ns {
		oks[i] = n == 1
	}
	return oks
}
