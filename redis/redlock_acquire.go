package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golocker/locker/driver"
)

// phase1 is one master's answer to redlock_acquire.lua.
type phase1 struct {
	granted bool
	fence   uint64 // highest token the master has seen
	now     uint64 // its clock, µs
	pttl    int64  // when held by another: its remaining ms
}

// TryAcquire implements driver.Driver: phase 1 on every master, then the
// token written to those that granted (see RedlockConfig). On any failure
// it releases what it took everywhere.
func (d *redlockDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Owner == "" || strings.IndexByte(req.Owner, ' ') >= 0 {
		return driver.Grant{}, driver.Permanent(fmt.Errorf("acquire: owner token %q is empty or contains a space", req.Owner))
	}
	start := time.Now()
	valid := validity(req.TTL)
	// The requests of an acquisition are of no use after its validity:
	// that bounds them, even after TryAcquire returned (late answers).
	budget, cancel := context.WithDeadline(d.life, start.Add(valid))
	context.AfterFunc(budget, cancel) // late answers may come until then
	keys := []string{lockKey(req.Key), fenceKey(req.Key)}
	ttlArg := millis(req.TTL)
	delayArg := millis(cmp.Or(d.restartDelay, d.ttl))
	// The attempt's mark: its grants carry it until phase 2 writes the
	// token, so that undoing them never removes another attempt's (the
	// attempts of a waiting Lock share their owner).
	mark := "n" + strconv.FormatUint(rand.Uint64(), 36)
	// A master may answer after the outcome was settled without it, and
	// have granted. While the attempt runs, such grants are set aside: a
	// granted lock keeps them (more masters, more failures tolerated;
	// renewals extend them), a failed attempt undoes them with the rest.
	// Once the attempt is over, a late grant stays only while the lock is
	// held (its Release, which forgets the owner first, is still to come).
	var lateMu sync.Mutex
	over := false
	var lateGrants []int
	// Every late answer, once handled: a failed attempt waits for them
	// (awaitStragglers).
	arrived := make(chan struct{}, len(d.masters))
	finish := func(granted bool) []int {
		if granted {
			d.live.Store(req.Owner, struct{}{})
		}
		lateMu.Lock()
		defer lateMu.Unlock()
		over = true
		return lateGrants
	}
	rs, errs := fanout(ctx, d, nil, budget, func(ctx context.Context, m Master) (phase1, error) {
		v, err := d.acquire.Run(ctx, m, keys, req.Owner, ttlArg, labelData(req.Label, req.Data), mark, delayArg).Slice()
		if err != nil {
			return phase1{}, err
		}
		return parsePhase1(v)
	}, byQuorum(d, func(r phase1) bool { return r.granted }), func(i int, r phase1, err error) {
		defer func() { arrived <- struct{}{} }() // one per master: never blocks
		if !r.granted && err == nil {
			return // held by another owner: nothing of ours
		}
		lateMu.Lock()
		if !over {
			lateGrants = append(lateGrants, i)
			lateMu.Unlock()
			return
		}
		lateMu.Unlock()
		if _, held := d.live.Load(req.Owner); !held {
			ctx, cancel := context.WithTimeout(d.life, cleanupTimeout)
			defer cancel()
			d.undoOn(ctx, req.Key, req.Owner, mark, "", d.only(i))
		}
	})
	granted := make([]bool, len(rs))
	var token uint64
	held := time.Duration(0)
	for i, r := range rs {
		switch {
		case errs[i] != nil:
		case r.granted:
			granted[i] = true
			token = max(token, r.fence+1, r.now)
		case r.pttl > 0:
			if rem := time.Duration(r.pttl) * time.Millisecond; held == 0 || rem < held {
				held = rem
			}
		}
	}
	// Undo where the lock may be ours: where phase 1 granted, or failed
	// after it may have run. A master still to answer undoes a late grant
	// itself (above); one that answered "held" has nothing of ours.
	mayHold := make([]bool, len(rs))
	for i, err := range errs {
		mayHold[i] = granted[i] || err != nil && !errors.Is(err, errPending) && maybeExecuted(err)
	}
	stragglers := 0
	for _, err := range errs {
		if errors.Is(err, errPending) {
			stragglers++
		}
	}
	tokenArg := ""
	undo := func(cause error) error {
		awaitStragglers(ctx, stragglers, arrived, min(req.TTL/4, time.Until(start.Add(valid))))
		for _, i := range finish(false) {
			mayHold[i] = true
		}
		return d.undo(ctx, req, mayHold, mark, tokenArg, cause)
	}
	t := d.count(granted, errs)
	if t.ok < d.quorum {
		if t.not > 0 {
			return driver.Grant{}, undo(driver.Held(held))
		}
		return driver.Grant{}, undo(d.failure("acquire", t))
	}
	tokenArg = strconv.FormatUint(token, 10)
	oks, errs := fanout(ctx, d, granted, budget, func(ctx context.Context, m Master) (bool, error) {
		n, err := d.commit.Run(ctx, m, keys, req.Owner, tokenArg, labelData(req.Label, req.Data), d.retentionArg, mark).Int64()
		return n == 1, err
	}, byQuorum(d, func(ok bool) bool { return ok }), nil)
	if t := d.count(oks, errs); t.ok < d.quorum {
		return driver.Grant{}, undo(d.failure("acquire: writing the token", t))
	}
	if elapsed := time.Since(start); elapsed >= valid {
		return driver.Grant{}, undo(fmt.Errorf("acquire: took %v, more than the validity %v", elapsed, valid))
	}
	finish(true)
	return driver.Grant{Token: token, Validity: valid, Since: start}, nil
}

// awaitStragglers waits, up to wait or until ctx ends, for the late answers
// of the n masters that a failed attempt's phase 1 settled without. A
// request still on its way may reach its master after the attempt
// answered, and after the key was freed there: its grant then holds the
// key on that master until the late answer's undo, a round trip later,
// and a quorum's worth of them (several refused callers) keeps the key
// from the next caller after an Unlock. A grant that arrives while the
// attempt waits is undone with the attempt's others, before it answers.
func awaitStragglers(ctx context.Context, n int, arrived <-chan struct{}, wait time.Duration) {
	if n == 0 || wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for ; n > 0; n-- {
		select {
		case <-arrived:
		case <-ctx.Done():
			return
		case <-t.C:
			return
		}
	}
}

// parsePhase1 reads redlock_acquire.lua's reply.
func parsePhase1(v []any) (phase1, error) {
	if len(v) >= 2 {
		if g, _ := v[0].(int64); g == 0 {
			pttl, _ := v[1].(int64)
			return phase1{pttl: pttl}, nil
		}
	}
	if len(v) == 3 {
		fs, _ := v[1].(string)
		ns, _ := v[2].(string)
		fence, err1 := strconv.ParseUint(fs, 10, 64)
		now, err2 := strconv.ParseUint(ns, 10, 64)
		if err1 == nil && err2 == nil {
			return phase1{granted: true, fence: fence, now: now}, nil
		}
	}
	return phase1{}, fmt.Errorf("malformed reply %v", v)
}

// undo removes the grants of one attempt (mark, and token when it drew
// one) on the masters of on, with a fresh context: ctx may be why it
// failed. It returns cause, wrapped in a driver.Residue when some master
// could not be reached: the engine retries on those until they answer.
func (d *redlockDriver) undo(ctx context.Context, req driver.Request, on []bool, mark, token string, cause error) error {
	if !slices.Contains(on, true) {
		return cause
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(req.TTL, cleanupTimeout))
	defer cancel()
	failed := d.undoOn(ctx, req.Key, req.Owner, mark, token, on)
	if failed == nil {
		return cause
	}
	d.logger.Warn("locker: redlock: could not undo a failed acquisition on every master; retrying in the background",
		"key", req.Key, "masters", len(d.masters))
	key, owner := req.Key, req.Owner
	return &driver.Residue{Err: cause, Cleanup: func(ctx context.Context) error {
		if failed = d.undoOn(ctx, key, owner, mark, token, failed); failed != nil {
			return errors.New("redlock: some masters unreachable")
		}
		return nil
	}}
}

// undoOn runs redlock_undo.lua on the masters of on and returns those that
// failed, or nil.
func (d *redlockDriver) undoOn(ctx context.Context, key, owner, mark, token string, on []bool) []bool {
	_, errs := fanout(ctx, d, on, ctx, func(ctx context.Context, m Master) (int64, error) {
		return d.undoScript.Run(ctx, m, []string{lockKey(key)}, owner, mark, token).Int64()
	}, nil, nil)
	var failed []bool
	for i, err := range errs {
		if err != nil && err != errNotAsked {
			if failed == nil {
				failed = make([]bool, len(errs))
			}
			failed[i] = true
		}
	}
	return failed
}
