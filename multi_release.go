package locker

import (
	"context"
	"errors"
	"time"

	"github.com/golocker/locker/driver"
)

// releasesTogether returns the holds of locks when they all come from one
// engine whose driver is a [driver.MultiReleaser]: their Unlock is then one
// driver call. It returns nil otherwise.
func releasesTogether(locks []Lock) (*engine, []*hold) {
	if len(locks) < 2 {
		return nil, nil
	}
	first, ok := locks[0].(*handle)
	if !ok || first.h.e.multiReleaser == nil || first.h.shared {
		return nil, nil
	}
	e := first.h.e
	hs := make([]*hold, len(locks))
	for i, lk := range locks {
		h, ok := lk.(*handle)
		if !ok || h.h.e != e || h.h.shared {
			return nil, nil
		}
		hs[i] = h.h
	}
	return e, hs
}

// unlockAll is Unlock of every hold of hs, with one ReleaseMulti call for
// the holds released at once and one Keep each for the holds whose MinHold
// has not ended. It returns one error per hold, as Unlock would.
func (e *engine) unlockAll(ctx context.Context, hs []*hold) []error {
	errs := make([]error, len(hs))
	defer func() {
		for i, h := range hs {
			(&handle{h: h}).observeRelease(ctx, errs[i])
		}
	}()
	if !e.enter() {
		for i, h := range hs {
			errs[i] = e.err("unlock", h.key, ErrNotHeld, ErrClosed)
		}
		return errs
	}
	defer e.calls.Done()
	claimed := make([]int, 0, len(hs)) // indexes in hs
	for i, h := range hs {
		if !h.claimHeld() {
			errs[i] = e.err("unlock", h.key, ErrNotHeld, (&handle{h: h}).Err())
			continue
		}
		claimed = append(claimed, i)
	}
	if len(claimed) == 0 {
		return errs
	}
	if ctx == nil || ctx.Err() != nil {
		for _, i := range claimed {
			errs[i] = hs[i].releaseLater(ctx)
		}
		return errs
	}
	// Read under one hold of e.mu: the MinHold ends, which Extend may move.
	keep := make([]time.Time, len(claimed))
	batch := make([]driver.Lease, 0, len(claimed))
	e.mu.Lock()
	for j, i := range claimed {
		keep[j] = hs[i].minHoldEnd
	}
	e.mu.Unlock()
	for j, i := range claimed {
		if keep[j].IsZero() {
			batch = append(batch, hs[i].lease)
		}
	}
	cctx, scope := e.callContext(ctx)
	defer scope.end()
	var (
		res  []error
		err  error
		gone bool
	)
	if e.inlineFor(ctx) {
		// No closures to allocate: detached would run it inline too.
		res, err = e.releaseAll(cctx, hs, claimed, keep, batch)
	} else {
		ra := releaseAllArgs{e: e, ctx: cctx, hs: hs, claimed: claimed, keep: keep, batch: batch}
		res, err, gone = detachedWith(e, &e.releaseAllCalls, true, ctx, cctx, releaseAllArgs.run, ra,
			func() func([]error, error) {
				return func(res []error, err error) {
					for j, i := range claimed {
						if err != nil {
							hs[i].lateRelease(err)
						} else {
							hs[i].lateRelease(res[j])
						}
					}
				}
			})
	}
	for j, i := range claimed {
		if err == nil && !gone {
			errs[i] = hs[i].released(cctx, res[j], false)
		} else {
			errs[i] = hs[i].released(cctx, err, gone)
		}
	}
	return errs
}

// releaseAll releases the holds hs[i], i in claimed: with one ReleaseMulti
// call for the leases of batch (those whose keep is zero, in order), and
// one Keep each for the others. It returns one error per claimed hold.
func (e *engine) releaseAll(ctx context.Context, hs []*hold, claimed []int, keep []time.Time, batch []driver.Lease) ([]error, error) {
	res := make([]error, len(claimed))
	var berrs []error
	if len(batch) > 0 {
		var err error
		if berrs, err = e.multiReleaser.ReleaseMulti(ctx, batch); err != nil {
			return nil, err
		}
		if len(berrs) != len(batch) {
			return nil, errMultiReleases
		}
	}
	for j, i := range claimed {
		if keep[j].IsZero() {
			res[j], berrs = berrs[0], berrs[1:]
		} else {
			res[j] = e.giveUp(ctx, hs[i].lease, keep[j])
		}
	}
	return res, nil
}

// releaseAllArgs is the arguments of one detached releaseAll of unlockAll.
type releaseAllArgs struct {
	e       *engine
	ctx     context.Context
	hs      []*hold
	claimed []int
	keep    []time.Time
	batch   []driver.Lease
}

func (a releaseAllArgs) run() ([]error, error) {
	return a.e.releaseAll(a.ctx, a.hs, a.claimed, a.keep, a.batch)
}

// errMultiReleases is the error of a driver whose ReleaseMulti returned a
// number of results other than the number of leases.
var errMultiReleases = errors.New("driver returned a result count other than the lease count")
