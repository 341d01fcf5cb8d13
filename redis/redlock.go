package redis

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

var (
	//go:embed redlock_acquire.lua
	redlockAcquireLua string
	//go:embed redlock_commit.lua
	redlockCommitLua string
	//go:embed redlock_release.lua
	redlockReleaseLua string
	//go:embed redlock_undo.lua
	redlockUndoLua string
)

// Master is the part of a go-redis v9 client a Redlock uses on each of its
// masters: scripts and pipelines. *redis.Client and every
// redis.UniversalClient satisfy it, as do wrappers of them. Each Master must
// reach its own, independent Redis server (no replication between them).
type Master interface {
	goredis.Scripter
	Pipeline() goredis.Pipeliner
}

// DriftFactor is the Redlock clock drift allowance per unit of TTL: a lock
// taken with TTL t counts as valid for t - (t*DriftFactor + [DriftFloor])
// after its first request was sent, as the Redlock description prescribes.
const DriftFactor = 0.01

// DriftFloor is the fixed part of the Redlock clock drift allowance.
const DriftFloor = 2 * time.Millisecond

// NewRedlock returns a Locker that keeps each lock on a majority of
// masters, independent Redis servers reached through the caller's own
// go-redis clients, which the Locker never closes. It is RedlockConfig{}.New;
// see [RedlockConfig] for what Redlock guarantees and what it does not.
//
// There must be an odd number of masters, at least three, each a distinct
// client. NewRedlock does not contact Redis. It returns an error matching
// locker.ErrInvalidOption when the masters are fewer than three, even in
// number, nil or repeated, or when an option is invalid.
func NewRedlock(masters []Master, opts ...locker.Option) (locker.Locker, error) {
	return RedlockConfig{}.New(masters, opts...)
}

// RedlockConfig is the configuration of a Redlock Locker beyond the shared
// locker options; its zero value is the default, and [NewRedlock] is
// RedlockConfig{}.New.
//
// # How it works
//
// The Redlock algorithm (redis.io/docs/manual/patterns/distributed-locks)
// over N independent masters, with quorum N/2+1:
//
//   - Acquire, phase 1: on every master at once, set the lock key if it is
//     absent (SET PX TTL in a script that also returns the master's fence
//     and clock), marked with the attempt so that undoing one attempt never
//     removes another's grant (the attempts of a waiting Lock share their
//     owner). Fewer than a quorum granted: undo where the attempt may have
//     taken the key, report the key held.
//   - Phase 2: the fencing token is max(highest fence + 1, highest clock in
//     µs) over the masters that granted; it is written into the lock and
//     the fence of each of them (only where the lock is still ours). The
//     lock counts only once a quorum confirmed, and only if phases 1 and 2
//     together took less than the validity, TTL - (TTL*[DriftFactor] +
//     [DriftFloor]); otherwise it is undone. The validity counts
//     from the moment phase 1 was sent, and the engine's own deadline
//     (Lock.Done) is shorter still.
//   - Renew: compare-and-PEXPIRE on every master (the Locker's locks due in
//     a renewal tick in one pipeline per master, the masters in parallel);
//     the lock stays valid when a quorum renewed it, and is lost when so
//     many masters say it is not ours that no quorum can renew it.
//   - Release: compare-and-delete on every master. A failed or abandoned
//     attempt releases too, so no partial acquisition is left behind;
//     masters that could not be reached are cleaned up in the background
//     until they answer.
//
// Every step returns as soon as its outcome is settled (a quorum did it,
// or so many masters refused or failed that no quorum can), so a dead or
// hung minority of masters does not slow it down; the requests still
// running finish in the background (bounded as [RedlockConfig].Timeout
// says), and a late phase-1 grant that nobody holds is undone as soon as
// it arrives. An attempt whose ctx ends cancels its requests and waits
// for them (up to 2 s) before it undoes them, so that a cancelled Lock
// leaves nothing behind. Waiting Locks poll with the Locker's backoff (locker.WithBackoff), bounded by the
// shortest remaining TTL a master reported: there is no queue and no
// pub/sub across independent masters, so waiters are not served in arrival
// order.
//
// # Guarantees
//
// Under Redlock's timing assumptions (bounded network delay, bounded
// process pauses, clocks that drift by less than the allowance, no server
// clock jumps), with at most (N-1)/2 masters failed at once, and with
// [RedlockConfig].RestartDelay at least the longest TTL in use (restarts,
// even of every master, then do not count against that bound):
//
//   - A key is held by one owner at a time: a quorum set it, and every two
//     quorums share a master.
//   - Lock.Done closes before a quorum of masters can expire the lock.
//   - Fencing tokens strictly increase per key. Every holder's token is on
//     the fence of a quorum before its lock counts, and every later quorum
//     shares a master with it; a master restarted with an empty dataset
//     still answers with its clock, so the token rises above the clock of
//     the previous acquisition (keep clocks on NTP, as for the single-node
//     Locker).
//
// # What it does not guarantee
//
// Redlock is safe only while the timing assumptions hold. Martin
// Kleppmann's critique ("How to do distributed locking", 2016) applies in
// full: a holder paused (GC, swapping, a stopped VM) past its validity, a
// message delayed past it, or a server clock that jumps forward (an expiry
// that comes early) lets a second owner in while the first still believes
// it holds the lock, and nothing in Redis can stop the first one's late
// writes. A master whose data is flushed while it runs (FLUSHALL, an
// operator deleting keys) forgets the locks it held: if it was part of a
// holder's quorum, a second owner can get a quorum with it. A master that
// restarts forgets them too (without persistence, or its last writes with
// RDB snapshots or AOF fsync every second), but it grants nothing for
// RestartDelay after its start (Redlock's delayed restart, from the
// server's own uptime), by which time every lock it may have forgotten has
// expired or been renewed without it; the Failover case of the
// conformance suite restarts a majority of the masters one after the
// other to check it.
//
// The fencing tokens mitigate this: they keep increasing across all of
// these faults (even while two owners overlap, the later one has the
// higher token), so a store that rejects writes carrying a token lower
// than one it has already seen turns a late writer into a harmless one.
// Without such a check on the protected resource, treat Redlock as an
// efficiency lock (avoiding duplicate work), not a correctness one.
//
// When correctness must not depend on timing, choose a consensus store:
// etcd (package etcd) or ZooKeeper (package zookeeper) keep locks
// linearizable through leader loss and make waiters queue in order. Redlock
// needs no consensus system and no single primary: choose it when Redis is
// what you run and one Redis server failing must not stop locking.
//
// # Limits
//
//   - Each acquisition costs two round trips to every master (one more
//     than a single node), and waiting is polling, not a queue.
//   - Redlock does not use pub/sub and needs no Cluster hash slots: each
//     master is a plain server (a Cluster as a master is not supported).
//   - Key names are those of the single-node Locker ([KeysOf]: Lock and
//     Fence); do not point a single-node Locker and a Redlock with the same
//     prefix at the same server.
//   - Renewals extend a lock only where it still exists: a master that
//     restarted without its data rejoins a lock's quorum at the key's next
//     acquisition, so a lock held for long across such a restart tolerates
//     one master failure fewer until then.
//   - Every master, new or restarted, joins quorums only RestartDelay (by
//     default the TTL) after it started: a fresh set of masters grants
//     nothing in its first TTL (Lock waits, TryLock fails with
//     ErrNotAcquired), and a restart of a majority makes locking wait for
//     as long. Each acquisition reads every master's uptime (INFO server,
//     in its script: a few microseconds).
//   - Close waits for the requests still running in the background; a
//     hung master can make it wait until their bound (an acquisition's
//     validity, or the client's read timeout).
//   - Measured on loopback (a loaded 2-core VM, integration/redis):
//     uncontended Lock+Unlock 0.71–1.27 ms on 3 masters, 0.97–2.7 ms on 5,
//     against 0.11–0.21 ms for [New] in the same run; SIGKILL of one of 3
//     masters during a contended run: 0 overlaps, tokens increasing, and
//     as many acquisitions per second as with all three up (with
//     go-redis's retries off, see Timeout).
type RedlockConfig struct {
	// FenceRetention is how long a fence key outlives its lock's last
	// acquisition on each master (default [FenceRetention]; at least a
	// second), as in [Config].
	FenceRetention time.Duration

	// Timeout, when set, bounds each request to one master; it must not
	// exceed the TTL. Without it, a request is bounded by what it serves:
	// an acquisition's by its validity, the others by the caller's ctx
	// (the engine bounds renewals and releases). A slow or hung master
	// does not hold up an operation whose outcome the others settle (a
	// quorum did it, or can no longer): its request finishes in the
	// background. go-redis only honours these bounds with
	// Options.ContextTimeoutEnabled set on the masters' clients; otherwise
	// their own ReadTimeout applies. Turn go-redis's retries off on those
	// clients too (MaxRetries -1, DialerRetries 1): the engine decides
	// when to try again, and with go-redis's default dial retries (5, 100
	// ms apart) a dead master holds every attempt for half a second while
	// its partial grants block the other contenders (measured with one of
	// three masters killed: 0–37 acquisitions in 2 s with the defaults,
	// 166–330 without retries, against 69–209 per second with all three
	// up).
	Timeout time.Duration

	// RestartDelay is how long after its start a master grants no lock
	// (Redlock's delayed restart): a master restarted without its data,
	// or without its last writes (RDB snapshots, AOF fsync every second),
	// has forgotten locks that the other masters still hold, and a quorum
	// with it would give such a key out twice. Default: the Locker's TTL.
	// Set it to the longest TTL of every Locker on these masters
	// (locker.LockTTL included); the delay applies to every
	// start, so a new master joins quorums only this long after it came up
	// (INFO server's uptime_in_seconds, read by the acquire script: a user
	// restricted by ACL needs +info besides the scripting commands, or
	// every acquisition fails with the server's NOPERM error).
	RestartDelay time.Duration
}

// New returns a Locker as [NewRedlock] does, with c.
func (c RedlockConfig) New(masters []Master, opts ...locker.Option) (locker.Locker, error) {
	d, err := c.driver(masters)
	if err != nil {
		return nil, err
	}
	l, err := locker.New(d, opts...)
	if err != nil {
		d.stop()
	}
	return l, err
}

// driver validates c and masters and returns the driver of a Redlock.
func (c RedlockConfig) driver(masters []Master) (*redlockDriver, error) {
	invalid := func(format string, args ...any) error {
		return &locker.Error{Op: "new", Backend: "redlock", Err: locker.ErrInvalidOption, Cause: fmt.Errorf(format, args...)}
	}
	retention := c.FenceRetention
	if retention == 0 {
		retention = FenceRetention
	}
	if retention < time.Second {
		return nil, invalid("RedlockConfig.FenceRetention %v is below one second", c.FenceRetention)
	}
	if c.Timeout < 0 {
		return nil, invalid("RedlockConfig.Timeout %v is negative", c.Timeout)
	}
	if c.RestartDelay < 0 {
		return nil, invalid("RedlockConfig.RestartDelay %v is negative", c.RestartDelay)
	}
	switch n := len(masters); {
	case n < 3:
		return nil, invalid("redlock needs at least 3 masters, got %d", n)
	case n%2 == 0:
		return nil, invalid("redlock needs an odd number of masters, got %d: an even one tolerates no more failures than one master fewer", n)
	}
	seen := make(map[Master]int, len(masters))
	for i, m := range masters {
		if m == nil || isNil(m) {
			return nil, invalid("redlock master %d is nil", i)
		}
		if what, zero := zeroClient(m); zero {
			return nil, invalid("redlock master %d is a zero %s: make it with its go-redis constructor (redis.NewClient, …)", i, what)
		}
		if !reflect.TypeOf(m).Comparable() {
			continue
		}
		if j, dup := seen[m]; dup {
			return nil, invalid("redlock masters %d and %d are the same client: each must reach its own server", j, i)
		}
		seen[m] = i
	}
	d := &redlockDriver{
		masters:      append([]Master(nil), masters...),
		quorum:       len(masters)/2 + 1,
		acquire:      goredis.NewScript(redlockAcquireLua),
		commit:       goredis.NewScript(redlockCommitLua),
		release:      goredis.NewScript(redlockReleaseLua),
		undoScript:   goredis.NewScript(redlockUndoLua),
		renew:        goredis.NewScript(renewLua),
		logger:       slog.New(slog.DiscardHandler),
		timeout:      c.Timeout,
		restartDelay: c.RestartDelay,
		retentionArg: strconv.FormatInt(retention.Milliseconds(), 10),
	}
	d.life, d.stop = context.WithCancel(context.Background())
	return d, nil
}

// redlockDriver implements driver.Driver, driver.BatchRenewer,
// driver.Keeper, driver.Inspector and driver.Configurer over N masters.
type redlockDriver struct {
	masters []Master
	quorum  int
	acquire *goredis.Script
	commit  *goredis.Script
	release *goredis.Script
	renew   *goredis.Script
	logger  *slog.Logger
	// undoScript is redlock_undo.lua.
	undoScript *goredis.Script

	// Requests still running after their outcome was settled; Close
	// waits for them.
	wg sync.WaitGroup
	// life ends when Close is called: it bounds the requests that outlive
	// their call.
	life context.Context
	stop context.CancelFunc
	// The owners of the locks acquired and not yet released (owner ->
	// struct{}), for late answers of phase 1 (see TryAcquire).
	live sync.Map

	timeout      time.Duration // per request to one master
	ttl          time.Duration
	restartDelay time.Duration // 0: the TTL
	retentionArg string
}

// Info implements driver.Driver.
func (d *redlockDriver) Info() driver.Info {
	return driver.Info{Name: "redlock", MaxKeyBytes: MaxKeyBytes, PerLockTTL: true}
}

// Configure implements driver.Configurer.
func (d *redlockDriver) Configure(_ context.Context, cfg driver.Config) error {
	if cfg.Logger != nil {
		d.logger = cfg.Logger
	}
	d.ttl = cfg.TTL
	if d.timeout > cfg.TTL {
		return fmt.Errorf("RedlockConfig.Timeout %v exceeds the TTL %v: %w", d.timeout, cfg.TTL, locker.ErrInvalidOption)
	}
	return nil
}

// validity is how long after its first request a lock taken or renewed
// with ttl stays valid: ttl minus the clock drift allowance.
func validity(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*DriftFactor) - DriftFloor
}

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
		v, err := d.acquire.Run(ctx, m, keys, req.Owner, ttlArg, req.Label, mark, delayArg).Slice()
		if err != nil {
			return phase1{}, err
		}
		return parsePhase1(v)
	}, byQuorum(d, func(r phase1) bool { return r.granted }), func(i int, r phase1, err error) {
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
	tokenArg := ""
	undo := func(cause error) error {
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
		n, err := d.commit.Run(ctx, m, keys, req.Owner, tokenArg, req.Label, d.retentionArg, mark).Int64()
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

// errNotAsked marks a master a phase left out (it did not grant phase 1).
var errNotAsked = errors.New("not part of the quorum")

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

// Release implements driver.Driver: compare-and-delete on every master.
// It succeeds when a quorum held the lock; it returns once the outcome is
// settled, the other masters' deletes finishing in the background.
func (d *redlockDriver) Release(ctx context.Context, l driver.Lease) error {
	d.live.Delete(l.Owner)
	ns, errs := fanout(ctx, d, nil, d.detached(), func(ctx context.Context, m Master) (int64, error) {
		return d.release.Run(ctx, m, []string{lockKey(l.Key)}, l.Owner).Int64()
	}, byQuorum(d, isOne), nil)
	return d.result("release", d.count(ones(ns), errs))
}

// ones reports which replies are 1.
func ones(ns []int64) []bool {
	oks := make([]bool, len(ns))
	for i, n := range ns {
		oks[i] = n == 1
	}
	return oks
}

// Renew implements driver.Driver: compare-and-PEXPIRE on every master.
func (d *redlockDriver) Renew(ctx context.Context, l driver.Lease) (time.Duration, error) {
	v, errs, err := d.RenewBatch(ctx, []driver.Lease{l})
	if err != nil {
		return 0, err
	}
	return v[0], errs[0]
}

// Keep implements driver.Keeper (locker.MinHold): compare-and-PEXPIRE to
// remaining on every master; nobody renews the key after that.
func (d *redlockDriver) Keep(ctx context.Context, l driver.Lease, remaining time.Duration) error {
	d.live.Delete(l.Owner) // given up: a late grant is no longer wanted
	ns, errs := fanout(ctx, d, nil, d.detached(), func(ctx context.Context, m Master) (int64, error) {
		return d.renew.Run(ctx, m, []string{lockKey(l.Key)}, l.Owner, millis(remaining)).Int64()
	}, byQuorum(d, isOne), nil)
	return d.result("keep", d.count(ones(ns), errs))
}

// RenewBatch implements driver.BatchRenewer: one pipeline per master, the
// masters in parallel; a lease is renewed when a quorum renewed it.
func (d *redlockDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	// Settled once every lease is: renewed by a quorum, or refused or
	// failed by so many masters that no quorum can renew it.
	settled := func(answered []bool, per [][]*goredis.Cmd, errs []error) bool {
		for j := range ls {
			ok, bad := 0, 0
			for i, a := range answered {
				if !a {
					continue
				}
				if errs[i] != nil { // not asked, or no answer: no commands
					bad++
				} else if n, err := per[i][j].Int64(); err == nil && n == 1 {
					ok++
				} else {
					bad++
				}
			}
			if ok < d.quorum && bad <= len(answered)-d.quorum {
				return false
			}
		}
		return true
	}
	ttls := make([]any, len(ls))
	for i, l := range ls {
		ttls[i] = millis(l.TTL)
	}
	per, perr := fanout(ctx, d, nil, d.detached(), func(ctx context.Context, m Master) ([]*goredis.Cmd, error) {
		return renewPipelined(ctx, m, d.renew, ls, func(l driver.Lease) string { return lockKey(l.Key) }, ttls), nil
	}, settled, nil)
	validities := make([]time.Duration, len(ls))
	results := make([]error, len(ls))
	oks := make([]bool, len(d.masters))
	errs := make([]error, len(d.masters))
	for j, l := range ls {
		for i := range d.masters {
			if perr[i] != nil {
				oks[i], errs[i] = false, perr[i]
				continue
			}
			n, err := per[i][j].Int64()
			oks[i], errs[i] = n == 1, err
		}
		if results[j] = d.result("renew", d.count(oks, errs)); results[j] == nil {
			validities[j] = validity(l.TTL)
		} else if errors.Is(results[j], driver.ErrNotHeld) {
			d.live.Delete(l.Owner)
		}
	}
	return validities, results, nil
}

// inspected is one master's view of a key.
type inspected struct {
	value   string // "" when absent
	expires time.Time
}

// Inspect implements driver.Inspector: the lock's value and expiry on
// every master, with the master's clock. The key is held when a quorum of
// masters has the same owner; Expires is the earliest of their expiries,
// after which that owner no longer holds a quorum unless it renews.
func (d *redlockDriver) Inspect(ctx context.Context, key string) (driver.Status, error) {
	rs, errs := fanout(ctx, d, nil, ctx, func(ctx context.Context, m Master) (inspected, error) {
		pipe := m.Pipeline()
		get := pipe.Get(ctx, lockKey(key))
		pttl := pipe.PTTL(ctx, lockKey(key))
		now := pipe.Time(ctx)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
			return inspected{}, classify(err)
		}
		r := inspected{value: get.Val()}
		if ttl := pttl.Val(); ttl > 0 && r.value != "" {
			r.expires = now.Val().Add(ttl).UTC()
		}
		return r, nil
	}, nil, nil)
	owners := map[string]int{}
	answered := 0
	for i, r := range rs {
		if errs[i] != nil {
			continue
		}
		answered++
		if owner, _, ok := strings.Cut(r.value, " "); ok {
			owners[owner]++
		}
	}
	if answered < d.quorum {
		return driver.Status{}, d.failure("inspect", d.count(make([]bool, len(errs)), errs))
	}
	var st driver.Status
	for owner, n := range owners {
		if n < d.quorum {
			continue
		}
		st.Held = true
		for i, r := range rs {
			if errs[i] != nil || !strings.HasPrefix(r.value, owner+" ") {
				continue
			}
			parts := strings.SplitN(r.value, " ", 3)
			if tok, err := strconv.ParseUint(parts[1], 10, 64); err == nil && tok > st.Token {
				st.Token = tok
			}
			if len(parts) == 3 {
				st.Label = parts[2]
			}
			if !r.expires.IsZero() && (st.Expires.IsZero() || r.expires.Before(st.Expires)) {
				st.Expires = r.expires
			}
		}
		if st.Token > 0 {
			st.Acquired = time.UnixMicro(int64(min(st.Token, math.MaxInt64))).UTC()
		}
	}
	return st, nil
}

// Close implements driver.Driver: it waits for the requests still running
// in the background (each bounded by the per-master timeout). The clients
// stay open.
func (d *redlockDriver) Close() error {
	d.stop()
	d.wg.Wait()
	return nil
}
