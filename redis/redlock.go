package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
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
// masters: scripts and pipelines. *goredis.Client and every
// goredis.UniversalClient satisfy it, as do wrappers of them. Each Master must
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
// RedlockConfig{}.New. docs/design.md in the repository explains the
// algorithm, why we ship it, and Martin Kleppmann's critique of it.
//
// # How it works
//
// The Redlock algorithm over N independent masters, with quorum N/2+1.
// An acquisition takes two round trips to every master, in parallel.
// Phase 1 sets the key where it is absent. Phase 2 writes the fencing token
// to the masters that granted. The lock counts once a quorum confirmed both
// phases within the validity, TTL - (TTL*[DriftFactor] + [DriftFloor]),
// counted from when phase 1 was sent. Otherwise it is undone. Renew and
// release go to every master. Every step returns once a quorum settled its
// outcome; requests still running finish in the background, bounded as
// [RedlockConfig].Timeout says; a failed acquisition first waits for them,
// up to TTL/4, so that what they took is undone before it answers. Waiting
// Locks poll with the Locker's backoff,
// bounded by the shortest remaining TTL a master reported.
//
// # Guarantees
//
// These hold under Redlock's timing assumptions: bounded network delay,
// bounded process pauses, clocks that drift by less than the allowance, and
// no server clock jumps. They need at most (N-1)/2 masters failed at once,
// and [RedlockConfig].RestartDelay at least the longest TTL in use. Restarts,
// even of every master, then do not count against that bound.
//
//   - A key is held by one owner at a time: a quorum set it, and every two
//     quorums share a master.
//   - Lock.Done closes before a quorum of masters can expire the lock.
//   - Fencing tokens strictly increase per key: max(highest fence + 1,
//     highest clock in µs) over the masters that granted, on the fence of a
//     quorum before the lock counts. They keep increasing while two owners
//     overlap, and across a master restarted with an empty dataset.
//   - A renewal keeps the lock when a quorum renewed it. The lock is lost
//     once so many masters say it is not ours that no quorum can renew it.
//   - A cancelled or failed attempt undoes what it may have taken. Masters
//     that could not be reached are cleaned up in the background. A failed
//     attempt waits up to TTL/4 (its ctx allowing) for the masters still to
//     answer, and undoes their grants with the others before it returns, so
//     that a refused TryLock leaves nothing that keeps the key from the
//     next caller after an Unlock. A late phase-1 grant that nobody holds,
//     one later still, is undone as soon as it arrives.
//
// # Limits
//
//   - Redlock is safe only while the timing assumptions hold. A holder
//     paused past its validity, a message delayed past it, or a server clock
//     that jumps forward lets a second owner in while the first still runs.
//     A master whose data is flushed while it runs forgets its locks at once.
//     Check fencing tokens in the protected store, or treat Redlock as an
//     efficiency lock. Use etcd or ZooKeeper where correctness must not
//     depend on timing.
//   - Waiting is polling: waiters are not served in arrival order.
//   - Each master is a plain server: no Cluster as a master, no pub/sub.
//   - Key names are those of the single-node Locker ([KeysOf]: Lock and
//     Fence). Do not point a single-node Locker and a Redlock with the same
//     prefix at the same server.
//   - Renewals extend a lock only where it still exists. A master that
//     restarted without its data rejoins a lock's quorum at the key's next
//     acquisition; until then that lock tolerates one master failure fewer.
//   - Every master, new or restarted, grants nothing for RestartDelay after
//     it started. A fresh set of masters grants nothing in its first TTL:
//     Lock waits, TryLock fails with ErrNotAcquired. A restart of a majority
//     makes locking wait as long.
//   - The acquire script reads the master's uptime (INFO server): a user
//     restricted by ACL needs +info besides the scripting commands.
//   - A Lock whose ctx ends cancels its requests and waits for them, up to
//     2 s, before it undoes them, so that it leaves nothing behind.
//   - A refused TryLock (and each refused attempt of a waiting Lock) takes
//     as long as its slowest master, up to TTL/4: a hung master makes each
//     refusal wait TTL/4, or [RedlockConfig].Timeout when shorter.
//   - Close waits for the requests still running in the background. A hung
//     master can make it wait until their bound: an acquisition's validity,
//     or the client's read timeout.
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
	// when to try again. With go-redis's default dial retries (5, 100 ms
	// apart) a dead master holds every attempt for half a second, while
	// its partial grants block the other contenders.
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
		d.closeRenewals()
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
		setData:      goredis.NewScript(setDataLua),
		logger:       slog.New(slog.DiscardHandler),
		timeout:      c.Timeout,
		restartDelay: c.RestartDelay,
		retentionArg: strconv.FormatInt(retention.Milliseconds(), 10),
	}
	d.life, d.stop = context.WithCancel(context.Background())
	for _, m := range masters {
		if rc, closeRC := renewalClient(m); rc != nil {
			if d.renewers == nil {
				d.renewers = map[Master]Master{}
			}
			d.renewers[m], d.closeRenewers = rc, append(d.closeRenewers, closeRC)
		}
	}
	return d, nil
}

// renewerOf returns the client that renews on master m: the Locker's own
// copy of the caller's client (renewalClient), or m.
func (d *redlockDriver) renewerOf(m Master) Master {
	if rc := d.renewers[m]; rc != nil {
		return rc
	}
	return m
}

// closeRenewals closes the renewal clients.
func (d *redlockDriver) closeRenewals() {
	for _, c := range d.closeRenewers {
		_ = c()
	}
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
	setData *goredis.Script // setdata.lua
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

	// renewers are the clients of the Locker's own that renew on each
	// master whose client it could copy (renewalClient), closed by
	// closeRenewers; read-only once made.
	renewers      map[Master]Master
	closeRenewers []func() error

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
		labels := map[string]int{} // label parts: masters a SetData missed differ
		for i, r := range rs {
			if errs[i] != nil || !strings.HasPrefix(r.value, owner+" ") {
				continue
			}
			parts := strings.SplitN(r.value, " ", 3)
			if tok, err := strconv.ParseUint(parts[1], 10, 64); err == nil && tok > st.Token {
				st.Token = tok
			}
			if len(parts) == 3 {
				if labels[parts[2]]++; labels[parts[2]] > labels[labelOf(st)] {
					st.Label, st.Data = splitLabel(parts[2])
				}
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
	d.closeRenewals()
	return nil
}
