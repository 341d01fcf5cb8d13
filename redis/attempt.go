package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

// TryAcquire implements driver.Driver: one round trip (two the first time a
// server sees the script). It never queues: a free lock that has waiters
// goes to the first of them.
func (d *redisDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	ttlArg, ttl := d.ttlArgs(req.TTL)
	names := d.lockNames(req.Key)
	args := d.acquireArgs(req, ttlArg)
	r, err := d.attempt(ctx, req, names, &args, "0")
	if err != nil {
		return driver.Grant{}, err
	}
	if r <= 0 {
		return driver.Grant{}, driver.Held(time.Duration(max(-1-r, 0)) * time.Millisecond)
	}
	return driver.Grant{Token: uint64(r), Validity: time.Duration(ttl) * time.Millisecond, State: d.firstState(names)}, nil
}

// firstState is the Lease.State of a lock taken at the first attempt of a
// call: quietNames when fair (the key had no queue, as a rule), else names
// (an unfair caller takes a free key whoever waits).
func (d *redisDriver) firstState(names *lockNames) any {
	if d.unfairArg == "0" {
		return quietNames{names}
	}
	return names
}

// acquireArgs are the arguments of acquire.lua for req, boxed once for all
// the attempts of one driver call: attempt sets the seq and the channel.
type acquireArgs [9]any

// acquireArgs returns the arguments of req's attempts, with ttlArg its TTL
// argument (ttlArgs). The list is a value: its callers keep it on their
// stacks, as runScript only copies it.
func (d *redisDriver) acquireArgs(req driver.Request, ttlArg any) acquireArgs {
	return acquireArgs{req.Owner, ttlArg, d.labelArgFor(req), d.retentionArg, nil, d.staleArg(req.TTL), nil, d.lidArg, d.unfairArg}
}

// attempt runs acquire.lua once with args for the lock names: r > 0 is the
// token of a lock now held, r <= 0 means held by another owner for -r-1
// more milliseconds (r = 0: unknown). seq is "0" for TryLock, else the
// attempt's number in a waiting Lock, which queues. On an error after
// which the lock may be ours, or the owner may be queued, it cleans up
// (see leave) before returning.
func (d *redisDriver) attempt(ctx context.Context, req driver.Request, names *lockNames, args *acquireArgs, seq string) (int64, error) {
	if err := checkOwner(req.Owner); err != nil {
		return 0, err
	}
	args[4], args[6] = seqArg(seq), d.channelArgOf(names)
	keys, boxed, tomb := d.withTombOf(ctx, req, &names.keyNames)
	reply, err := d.runAcquire(ctx, keys, boxed, args[:]...)
	if tomb != "" { // else no cut, and no method value to allocate
		if cut := d.buryCut(ctx, req, err, tomb, d.leaveQueue); cut != nil {
			return 0, cut
		}
	}
	if errors.Is(err, errNotReplicated) {
		return 0, d.leave(ctx, req, fmt.Errorf("acquire: %w", err))
	}
	if err != nil {
		err = fmt.Errorf("acquire: %w", classify(err))
		if seq != "0" || maybeExecuted(err) {
			return 0, d.leave(ctx, req, err)
		}
		return 0, err
	}
	switch r := reply.(type) {
	case int64:
		return r, nil
	case []any:
		if len(r) == 3 && r[0] == "shared" {
			return 0, fmt.Errorf("acquire: %w: the key is %s, not a plain lock", driver.ErrConflict, shareKindOf(r[1], r[2]))
		}
		// {r}: a hand-over to the first waiter was written, its
		// message refused.
		if len(r) == 1 {
			if n, ok := r[0].(int64); ok {
				d.noPubSub(errPublishRefused)
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("acquire: unexpected reply %v", reply)
}

// seqArg returns seq boxed for acquire.lua's arguments: the seq of
// TryLock and of the first three attempts of a waiting Lock, where nearly
// every Lock stops, without an allocation.
func seqArg(seq string) any {
	switch seq {
	case "0":
		return "0"
	case "1":
		return "1"
	case "i1":
		return "i1"
	case "2":
		return "2"
	case "i2":
		return "i2"
	case "3":
		return "3"
	case "i3":
		return "i3"
	}
	return seq
}

// checkOwner refuses an owner token the scripts cannot store.
func checkOwner(owner string) error {
	if owner == "" || strings.IndexByte(owner, ' ') >= 0 {
		return driver.Permanent(fmt.Errorf("acquire: owner token %q is empty or contains a space", owner))
	}
	return nil
}

// errNotReplicated is the error of a write (an acquisition, a renewal,
// SetData, SetLimit, a Keep, a Break) that Config.Replicas replicas did
// not confirm in time.
var errNotReplicated = errors.New("the write did not reach the replicas in time")

// runAcquire runs acquire.lua with args. With Config.Replicas, a lock it
// took (a reply > 0) counts only once WAIT confirms it on the replicas:
// WAIT follows on the same connection, in one pipeline, and covers every
// write the primary had made before (the hand-over to this owner
// included). Otherwise it returns an error matching errNotReplicated, and
// the caller undoes the acquisition.
func (d *redisDriver) runAcquire(ctx context.Context, keys []string, boxed []any, args ...any) (any, error) {
	return d.runReplicatedKeys(ctx, d.acquire, took, keys, boxed, args...)
}

// runReplicated runs script with keys and args. With Config.Replicas, a
// reply that wrote (wrote reports it) is followed by WAIT, as in
// runAcquire; it returns the reply, and an error matching
// errNotReplicated when the replicas did not confirm in time. The write
// stays on the primary then. A nil wrote never waits.
func (d *redisDriver) runReplicated(ctx context.Context, script *goredis.Script, wrote func(any) bool, keys []string, args ...any) (any, error) {
	return d.runReplicatedKeys(ctx, script, wrote, keys, nil, args...)
}

// runReplicatedKeys is runReplicated with keys also boxed (nil: not), for
// runScript.
func (d *redisDriver) runReplicatedKeys(ctx context.Context, script *goredis.Script, wrote func(any) bool, keys []string, boxed []any, args ...any) (any, error) {
	if d.replicas == 0 || wrote == nil {
		return d.runScript(ctx, script, keys, boxed, args...)
	}
	for _, eval := range []func(context.Context, goredis.Scripter, []string, ...any) *goredis.Cmd{script.EvalSha, script.Eval} {
		pipe := d.client.Pipeline()
		// A copy: args, which the direct path only copies, stays on the
		// caller's stack.
		cmd := eval(ctx, pipe, keys, slices.Clone(args)...)
		wait := d.waitReplicas(ctx, pipe)
		_, _ = pipe.Exec(ctx) // errors are per command
		if isNoScript(cmd.Err()) {
			continue
		}
		reply, err := cmd.Result()
		if err != nil || !wrote(reply) {
			return reply, err
		}
		return reply, d.replicated(wait)
	}
	return nil, errors.New("the script cache dropped the script twice")
}

// waitReplicas queues WAIT for Config.Replicas on pipe, behind the writes
// it carries: WAIT covers every earlier write of its connection.
func (d *redisDriver) waitReplicas(ctx context.Context, pipe goredis.Pipeliner) *goredis.Cmd {
	return pipe.Do(ctx, "WAIT", d.replicas, d.replicaTimeout.Milliseconds())
}

// replicated reads the reply of a WAIT that waitReplicas queued: nil when
// Config.Replicas replicas confirmed in time, else an error matching
// errNotReplicated.
func (d *redisDriver) replicated(wait *goredis.Cmd) error {
	switch n, err := wait.Int64(); {
	case err != nil:
		return fmt.Errorf("%w: WAIT: %w", errNotReplicated, err)
	case n < int64(d.replicas):
		return fmt.Errorf("%w: %d of %d replicas within %v", errNotReplicated, n, d.replicas, d.replicaTimeout)
	}
	return nil
}

// repliedOne reports whether a script's reply is the integer 1 (setdata.lua,
// renew.lua: the write was made).
func repliedOne(reply any) bool { return reply == int64(1) }

// took reports whether an acquire.lua reply says the lock was taken.
func took(reply any) bool {
	r, ok := reply.(int64)
	return ok && r > 0
}

// leave removes every trace of req.Owner: its place in the queue, and the
// lock if it holds it (passed on to the next waiter, as by Unlock). It runs
// after an attempt whose outcome is unknown and when a waiting Lock gives
// up, so that no phantom holder or waiter is left until expiry. It uses a
// fresh context: ctx may be the reason the attempt failed. It returns
// cause, wrapped in a driver.Residue when the store could not be reached:
// the engine then retries until it can.
func (d *redisDriver) leave(ctx context.Context, req driver.Request, cause error) error {
	return d.cleanUpBy(ctx, req, cause, time.Time{}, d.leaveQueue)
}

// leaveBy is leave for a waiter whose record an attempt's reply at
// answered wrote (zero: none): the store stops counting the waiter stale
// later, and a lock handed over to it meanwhile is free claimWindow after
// that at the latest. No try outlasts that, and a residue carries it
// (driver.Residue.Gone).
func (d *redisDriver) leaveBy(ctx context.Context, req driver.Request, cause error, answered time.Time, stale time.Duration) error {
	var gone time.Time
	if !answered.IsZero() {
		gone = answered.Add(stale + claimWindow)
	}
	return d.cleanUpBy(ctx, req, cause, gone, d.leaveQueue)
}

// cleanUp runs out(key, owner) for req with a fresh context bounded by
// cleanupTimeout (with ctx when the driver cuts its calls and ctx can
// end), and returns cause, wrapped in a driver.Residue that runs out again
// when the store could not be reached.
func (d *redisDriver) cleanUp(ctx context.Context, req driver.Request, cause error, out func(ctx context.Context, key, owner string) error) error {
	return d.cleanUpBy(ctx, req, cause, time.Time{}, out)
}

// cleanUpBy is cleanUp for what the store drops by itself at gone (zero:
// unknown): no try outlasts it, and the residue carries it.
func (d *redisDriver) cleanUpBy(ctx context.Context, req driver.Request, cause error, gone time.Time, out func(ctx context.Context, key, owner string) error) error {
	key, owner := req.Key, req.Owner
	if d.cuts(ctx) {
		// The caller returns when ctx ends (driver.Info.PromptCancel).
		return goneBy(d.cleanUpCut(ctx, cause, func(ctx context.Context) error { return out(ctx, key, owner) }), gone)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(req.TTL, cleanupTimeout))
	defer cancel()
	if !gone.IsZero() {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadline(ctx, gone)
		defer stop()
	}
	if err := out(ctx, req.Key, req.Owner); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		d.logger.Warn("locker: redis: could not clean up after a failed or abandoned acquisition; retrying in the background",
			"key", req.Key, "err", err)
		return goneBy(residue(cause, func(ctx context.Context) error { return out(ctx, key, owner) }), gone)
	}
	return cause
}

// goneBy sets the Gone of err when it is a driver.Residue.
func goneBy(err error, gone time.Time) error {
	if r, ok := err.(*driver.Residue); ok {
		r.Gone = gone
	}
	return err
}

// leaveQueue runs release.lua for owner with "leave": out of the queue, and
// the lock passed on if it was handed over to owner.
func (d *redisDriver) leaveQueue(ctx context.Context, key, owner string) error {
	_, err := d.runRelease(ctx, newLockNames(key), owner, "1", "0")
	return classify(err)
}
