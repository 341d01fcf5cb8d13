package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

// runRelease runs release.lua on the lock names, with leave "1", "0" or
// "force" and quiet "1" or "0" (see release.lua), and returns 1 when owner's lock was released, 0 when owner held
// nothing. A release whose
// message the server refused counts as done (it is: the message is the
// script's last step), and switches the Locker to polling. With
// Config.Replicas, a forced release that freed the key (Break) waits for
// the replicas as runReplicated does; other releases do not.
func (d *redisDriver) runRelease(ctx context.Context, names *lockNames, owner string, leave, quiet any) (int64, error) {
	var wrote func(any) bool
	if leave == "force" {
		wrote = released
	}
	// The channel even without pub/sub: the waiters of Lockers with
	// pub/sub listen on it (see release.lua).
	v, err := d.runReplicatedKeys(ctx, d.release, wrote, names.keys[:], names.keyArgs, owner, names.channelArg, d.retentionArg, leave, d.unfairArg, quiet)
	if err != nil && !errors.Is(err, errNotReplicated) {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("unexpected reply %v", v)
	}
	if n == 2 {
		d.noPubSub(errPublishRefused)
		n = 1
	}
	return n, err
}

// released reports whether a release.lua reply says the lock was
// released.
func released(reply any) bool { return reply == int64(1) || reply == int64(2) }

// quietNames is the Lease.State of a lock taken at a fair first attempt
// (TryLock, or a Lock that did not wait): the key had no queue then, as a
// rule, so its release checks first that it still has none (quiet in
// release.lua). One pointer: it is stored in an interface without an
// allocation.
type quietNames struct{ *lockNames }

// stateNames returns the names in a lock's Lease.State, and whether the
// lock was taken at a fair first attempt (quietNames); nil when State
// holds none.
func stateNames(state any) (*lockNames, bool) {
	switch n := state.(type) {
	case *lockNames:
		return n, false
	case quietNames:
		return n.lockNames, true
	}
	return nil, false
}

// leaseKey returns the Redis key of a held lock.
func leaseKey(l driver.Lease) string {
	if n, _ := stateNames(l.State); n != nil {
		return n.keys[0]
	}
	return lockKey(l.Key)
}

// leaseNames returns the names of a held lock: its State, made when it was
// acquired.
func leaseNames(l driver.Lease) *lockNames {
	if n, _ := stateNames(l.State); n != nil {
		return n
	}
	return newLockNames(l.Key)
}

// Release implements driver.Driver: compare-and-delete, or hand-over to the
// first waiter, with a message on the key's channel, in one script.
func (d *redisDriver) Release(ctx context.Context, l driver.Lease) error {
	if isShared(l) {
		return d.releaseShared(ctx, l)
	}
	names, quiet := stateNames(l.State)
	if names == nil {
		names = newLockNames(l.Key)
	}
	// Boxed constants: no allocation.
	var quietArg any = "0"
	if quiet {
		quietArg = "1"
	}
	n, err := d.runRelease(ctx, names, l.Owner, "0", quietArg)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("release: %w", driver.ErrNotHeld)
	}
	return nil
}

// Keep implements driver.Keeper (locker.MinHold): compare-and-PEXPIRE to
// remaining; nobody renews the key after that, and the waiters take it when
// it expires. With Config.Replicas it returns only once WAIT confirms the
// new expiry on the replicas. Otherwise the error matches
// errNotReplicated, and a failover may bring back the expiry of the last
// renewal instead.
func (d *redisDriver) Keep(ctx context.Context, l driver.Lease, remaining time.Duration) error {
	if isShared(l) {
		return d.keepShared(ctx, l, remaining)
	}
	reply, err := d.runReplicated(ctx, d.renew, repliedOne, leaseNames(l).keys[:1:1], l.Owner, millis(remaining))
	switch {
	case errors.Is(err, errNotReplicated):
		return fmt.Errorf("keep: %w", err)
	case err != nil:
		return fmt.Errorf("keep: %w", classify(err))
	case reply == int64(0):
		return fmt.Errorf("keep: %w", driver.ErrNotHeld)
	case !repliedOne(reply):
		return fmt.Errorf("keep: unexpected reply %v", reply)
	}
	return nil
}

func renewResult(ttl, n int64, err error) (time.Duration, error) {
	switch {
	case err != nil:
		return 0, fmt.Errorf("renew: %w", err)
	case n == 0:
		return 0, fmt.Errorf("renew: %w", driver.ErrNotHeld)
	}
	return time.Duration(ttl) * time.Millisecond, nil
}

// RenewBatch implements driver.BatchRenewer: one pipeline of EVALSHA for all
// leases (on a Cluster, go-redis sends one pipeline per node, in parallel):
// renew.lua for a lock, shared_renew.lua for a shared hold. With
// Config.Replicas, WAIT ends the pipeline: a renewal counts only once the
// replicas confirm it. Otherwise its error matches errNotReplicated, and
// the lock keeps the validity of its last confirmed renewal.
func (d *redisDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	ctx = uncut(ctx) // bounded by the round's deadline
	ttls := make([]int64, len(ls))
	calls := make([]evalCall, len(ls))
	for i, l := range ls {
		var arg any
		arg, ttls[i] = d.ttlArgs(l.TTL)
		if st, ok := l.State.(*shareState); ok {
			calls[i] = evalCall{script: d.shareRenew, keys: st.keys[2:3], args: []any{l.Owner, arg}}
		} else {
			calls[i] = evalCall{script: d.renew, keys: leaseNames(l).keys[:1:1], args: []any{l.Owner, arg}}
		}
	}
	var wait func(context.Context, goredis.Pipeliner) *goredis.Cmd
	if d.replicas > 0 {
		wait = d.waitReplicas
	}
	cmds, waits := evalPipelinedThen(ctx, d.renewer, calls, wait)
	validity := make([]time.Duration, len(ls))
	errs := make([]error, len(ls))
	for i, c := range cmds {
		n, err := c.Int64()
		if err == nil && n == 1 && waits[i] != nil {
			err = d.replicated(waits[i])
		}
		validity[i], errs[i] = renewResult(ttls[i], n, err)
	}
	return validity, errs, nil
}

// renewPipelined runs renew (renew.lua) for every lease in one pipeline on
// c, with the lock key key(ls[i]) and the TTL argument ttls[i], and sends
// the leases whose EVALSHA found the script missing from the server's cache
// again with EVAL in a second pipeline. Errors are per command.
func renewPipelined(ctx context.Context, c Master, renew *goredis.Script, ls []driver.Lease, key func(driver.Lease) string, ttls []any) []*goredis.Cmd {
	calls := make([]evalCall, len(ls))
	for i, l := range ls {
		calls[i] = evalCall{script: renew, keys: []string{key(l)}, args: []any{l.Owner, ttls[i]}}
	}
	return evalPipelined(ctx, c, calls)
}

// evalCall is one script call of evalPipelined.
type evalCall struct {
	script *goredis.Script
	keys   []string
	args   []any
}

// evalPipelined runs every call with EVALSHA in one pipeline on c, and the
// calls that found their script missing from the server's cache again with
// EVAL in a second pipeline. Errors are per command.
func evalPipelined(ctx context.Context, c Master, calls []evalCall) []*goredis.Cmd {
	cmds, _ := evalPipelinedThen(ctx, c, calls, nil)
	return cmds
}

// evalPipelinedThen is evalPipelined with then (nil: none) queued at the
// end of each pipeline. waits[i] is what then queued in the pipeline whose
// reply cmds[i] is (nil without then).
func evalPipelinedThen(ctx context.Context, c Master, calls []evalCall, then func(context.Context, goredis.Pipeliner) *goredis.Cmd) (cmds, waits []*goredis.Cmd) {
	cmds = make([]*goredis.Cmd, len(calls))
	waits = make([]*goredis.Cmd, len(calls))
	run := func(idx []int, eval func(*goredis.Script, context.Context, goredis.Scripter, []string, ...any) *goredis.Cmd) {
		pipe := c.Pipeline()
		for _, i := range idx {
			cmds[i] = eval(calls[i].script, ctx, pipe, calls[i].keys, calls[i].args...)
		}
		var w *goredis.Cmd
		if then != nil {
			w = then(ctx, pipe)
		}
		_, execErr := pipe.Exec(ctx) // errors are per command, mostly
		blame(cmds, execErr)
		for _, i := range idx {
			waits[i] = w
		}
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	run(all, (*goredis.Script).EvalSha)
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		run(again, (*goredis.Script).Eval)
	}
	return cmds, waits
}
