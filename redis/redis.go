package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

const (
	// MaxKeyBytes is the longest key accepted, in bytes, counting the
	// Locker's prefix (locker.WithPrefix). Redis itself takes keys of up to
	// 512 MB, but a lock key is a name, not data: every renewal and release
	// sends it, and each held lock keeps its Redis names in memory. Hash
	// longer natural keys (a URL, a file path) before locking them.
	MaxKeyBytes = 1024

	// FenceRetention is the default of Config.FenceRetention: how long the
	// fence key of a lock (the last fencing token handed out for it)
	// outlives the lock's last acquisition. Keys locked once are forgotten
	// after it, so that locking ever new keys (one per job or order) does
	// not fill Redis. Tokens stay increasing without it: a new token is at
	// least the server's clock in microseconds, and the retention only has
	// to cover a server clock that steps back (see the package doc,
	// Fencing).
	FenceRetention = time.Hour

	// DefaultReplicaTimeout is the default of Config.ReplicaTimeout: how
	// long an acquisition waits for its replicas (WAIT) before it is undone.
	DefaultReplicaTimeout = 250 * time.Millisecond

	// cleanupTimeout bounds the compare-and-delete that undoes an
	// acquisition whose outcome is unknown.
	cleanupTimeout = 2 * time.Second
)

var (
	//go:embed lib.lua
	libLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed release.lua
	releaseLua string
	//go:embed renew.lua
	renewLua string
)

// Client is the part of a go-redis v9 client the Locker uses: scripts,
// pipelines and pub/sub. *redis.Client (a single node, or a Sentinel-managed
// primary from redis.NewFailoverClient), *redis.ClusterClient and every
// redis.UniversalClient satisfy it, as do wrappers of them.
type Client interface {
	goredis.Scripter
	Pipeline() goredis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
}

// New returns a Locker that keeps its locks in Redis through client, the
// caller's own go-redis v9 client, which the Locker never closes. The options
// are the shared locker options (locker.WithTTL, locker.WithPrefix, …).
//
// New does not contact Redis. It returns an error matching
// locker.ErrInvalidOption when client is nil or an option is invalid.
func New(client Client, opts ...locker.Option) (locker.Locker, error) {
	return Config{}.New(client, opts...)
}

// Config is the Redis-specific configuration of a Locker; its zero value
// is the default, and [New] is Config{}.New.
type Config struct {
	// FenceRetention is how long a fence key outlives its lock's last
	// acquisition (default [FenceRetention]; at least a second). Shorter
	// saves memory when ever new keys are locked (about 190 bytes per key);
	// it only has to cover a backward step of the server's clock.
	FenceRetention time.Duration

	// NoPubSub makes the Locker work without pub/sub from the start: no
	// script publishes, and waiting Locks poll (see the package doc,
	// Waiting without pub/sub). Set it for a deployment known to refuse
	// PUBLISH or SUBSCRIBE (ACL -@pubsub or resetchannels, rename-command,
	// a proxy without pub/sub); without it the Locker switches by itself
	// at the first refusal.
	NoPubSub bool

	// Replicas, when above 0, makes an acquisition (a lock taken, or
	// confirmed by the waiter it was handed over to) count only once
	// Redis's WAIT confirms that at least Replicas replicas have the write,
	// within ReplicaTimeout. When they do not, the acquisition is undone
	// (the key passed on or freed) and reported as a store error: TryLock
	// returns it, a waiting Lock queues again. With it, a lock granted
	// survives a failover to any of those replicas (see the package doc,
	// Replicated before granted). It needs a client of one primary
	// (redis.NewClient, or redis.NewFailoverClient for Sentinel): WAIT
	// must run on the connection of the write, which a Cluster client
	// does not promise.
	Replicas int

	// Unfair makes the Locker's locks barging instead of first come, first
	// served: a release frees the key and wakes only the first waiter (one
	// message, to its Locker; not again within a millisecond of waking
	// it: it tries again by itself then), and a free key goes to whoever
	// asks first,
	// a waiter woken or a Locker just asking (the one that released it,
	// looping, often). A hot key then changes hands without a wake-up on
	// the critical path, at the price of order: a waiter may be overtaken
	// again and again, as with Redisson's RLock beside its RFairLock. The
	// default is fair (see the package doc, Fair and unfair). Lockers of
	// both kinds may share a key.
	Unfair bool

	// ReplicaTimeout bounds the WAIT of Replicas (default
	// [DefaultReplicaTimeout]; at most a third of the TTL, since the
	// lock's validity counts from before the acquisition).
	ReplicaTimeout time.Duration
}

// New returns a Locker as the package-level [New] does, with c.
func (c Config) New(client Client, opts ...locker.Option) (locker.Locker, error) {
	retention := c.FenceRetention
	if retention == 0 {
		retention = FenceRetention
	}
	if retention < time.Second {
		return nil, &locker.Error{Op: "new", Backend: "redis", Err: locker.ErrInvalidOption,
			Cause: fmt.Errorf("Config.FenceRetention %v is below one second", c.FenceRetention)}
	}
	if isNil(client) {
		return nil, &locker.Error{Op: "new", Backend: "redis", Err: locker.ErrInvalidOption, Cause: errors.New("nil redis client")}
	}
	replicaTimeout := c.ReplicaTimeout
	if replicaTimeout == 0 {
		replicaTimeout = DefaultReplicaTimeout
	}
	var bad error
	switch client.(type) {
	case *goredis.ClusterClient, *goredis.Ring:
		if c.Replicas > 0 {
			bad = fmt.Errorf("Config.Replicas needs a client of one primary (redis.NewClient, redis.NewFailoverClient), not %T", client)
		}
	}
	switch {
	case c.Replicas < 0:
		bad = fmt.Errorf("Config.Replicas %d is negative", c.Replicas)
	case replicaTimeout < time.Millisecond:
		bad = fmt.Errorf("Config.ReplicaTimeout %v is below a millisecond", c.ReplicaTimeout)
	}
	if bad != nil {
		return nil, &locker.Error{Op: "new", Backend: "redis", Err: locker.ErrInvalidOption, Cause: bad}
	}
	if what, zero := zeroClient(client); zero {
		return nil, &locker.Error{Op: "new", Backend: "redis", Err: locker.ErrInvalidOption,
			Cause: fmt.Errorf("zero %s: make it with its go-redis constructor (redis.NewClient, …)", what)}
	}
	d := newDriver(client)
	d.retentionArg = strconv.FormatInt(retention.Milliseconds(), 10)
	d.poll.Store(c.NoPubSub)
	if c.Unfair {
		d.unfairArg = "1"
	}
	d.replicas, d.replicaTimeout = c.Replicas, replicaTimeout
	return locker.New(d, opts...)
}

// isNil reports whether c is nil or a typed nil pointer.
func isNil(c any) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// zeroClient reports whether c is a go-redis client that was not made by its
// constructor (a zero value, whose every call would panic), and names its
// type.
func zeroClient(c any) (what string, zero bool) {
	switch v := c.(type) {
	case *goredis.Client:
		return "*redis.Client", noOptions(func() bool { return v.Options() == nil })
	case *goredis.ClusterClient:
		return "*redis.ClusterClient", noOptions(func() bool { return v.Options() == nil })
	case *goredis.Ring:
		return "*redis.Ring", noOptions(func() bool { return v.Options() == nil })
	}
	return "", false
}

// noOptions runs a client's Options check; a zero *redis.Client panics in
// Options (its embedded base client is nil), which also means zero.
func noOptions(f func() bool) (zero bool) {
	defer func() {
		if recover() != nil {
			zero = true
		}
	}()
	return f()
}

// redisDriver implements driver.Driver, driver.Acquirer,
// driver.BatchRenewer and driver.Configurer on a go-redis client.
type redisDriver struct {
	client  Client
	acquire *goredis.Script
	release *goredis.Script
	renew   *goredis.Script
	logger  *slog.Logger
	notify  *notifier
	// lid names this Locker in its waiters' records: a hand-over is
	// announced on the key's channel .. ":" .. lid, which only this
	// Locker's notifier subscribes.
	lid string

	// poll is set once the Locker works without pub/sub (Config.NoPubSub,
	// or the server refused it): scripts get no channel and waiters poll
	// with wait, the Locker's backoff.
	poll atomic.Bool
	wait func(attempt int, remaining time.Duration) time.Duration

	// Config.Replicas and Config.ReplicaTimeout.
	replicas       int
	replicaTimeout time.Duration

	// Script arguments of this Locker, boxed once (Configure) so that a
	// call does not allocate them again.
	ttl          time.Duration
	ttlArg       any // ttl in milliseconds, as a string
	labelArg     any
	retentionArg any // FenceRetention in milliseconds, as a string
	staleMs      any // staleArg(ttl)
	unfairArg    any // "1" with Config.Unfair, else "0"

	// The eviction check started by Configure; Close stops and waits.
	stopCheck context.CancelFunc
	checked   chan struct{}
}

// include inserts lib.lua where a script says "-- #include lib.lua".
func include(script string) string {
	return strings.Replace(script, "-- #include lib.lua\n", libLua, 1)
}

func newDriver(client Client) *redisDriver {
	logger := slog.New(slog.DiscardHandler)
	d := &redisDriver{
		client:  client,
		acquire: goredis.NewScript(include(acquireLua)),
		release: goredis.NewScript(include(releaseLua)),
		renew:   goredis.NewScript(renewLua),
		logger:  logger,

		retentionArg: strconv.FormatInt(FenceRetention.Milliseconds(), 10),
		lid:          newLockerID(),
		unfairArg:    "0",
	}
	d.notify = newNotifier(client, logger, d.noPubSub, d.lid)
	return d
}

// errPublishRefused is the cause logged when a script found PUBLISH
// refused.
var errPublishRefused = errors.New("a script's PUBLISH was refused")

// noPubSub switches the Locker to work without pub/sub for good, after the
// server refused a PUBLISH or a SUBSCRIBE (cause): scripts publish no more,
// the notifier stops, and waiting Locks, woken, poll from their next
// attempt on. It logs the switch once.
func (d *redisDriver) noPubSub(cause error) {
	if !d.poll.CompareAndSwap(false, true) {
		return
	}
	d.logger.Info("locker: redis: the server refuses pub/sub; waiting Locks poll with the Locker's backoff from now on", "cause", cause)
	d.notify.disable()
}

// channelArg is the channel argument of the scripts for store key s: its
// channel, or "" (publish nothing) without pub/sub.
func (d *redisDriver) channelArg(s string) string {
	if d.poll.Load() {
		return ""
	}
	return channelName(s)
}

// Info implements driver.Driver.
func (d *redisDriver) Info() driver.Info {
	return driver.Info{Name: "redis", MaxKeyBytes: MaxKeyBytes, PerLockTTL: true}
}

// Configure implements driver.Configurer: it takes the logger and prepares
// the script arguments that are the same for every lock.
func (d *redisDriver) Configure(_ context.Context, cfg driver.Config) error {
	if cfg.Logger != nil {
		d.logger = cfg.Logger
		d.notify.logger = cfg.Logger
	}
	if d.replicas > 0 && d.replicaTimeout > cfg.TTL/3 {
		return fmt.Errorf("%w: Config.ReplicaTimeout %v is above a third of the TTL %v", locker.ErrInvalidOption, d.replicaTimeout, cfg.TTL)
	}
	d.wait = cfg.Wait
	d.ttl = cfg.TTL
	d.ttlArg = strconv.FormatInt(millis(cfg.TTL), 10)
	d.labelArg = cfg.Label
	d.staleMs = strconv.FormatInt(millis(3*refreshInterval(cfg.TTL)), 10)
	// New does not wait for Redis: the check runs in the background.
	ctx, cancel := context.WithTimeout(context.Background(), evictionCheckTimeout)
	d.stopCheck, d.checked = cancel, make(chan struct{})
	go func() {
		defer close(d.checked)
		defer cancel()
		d.checkEviction(ctx)
	}()
	return nil
}

// evictionCheckTimeout bounds the eviction check of a new Locker.
const evictionCheckTimeout = 10 * time.Second

// checkEviction warns when Redis may evict lock keys: with maxmemory set and
// a maxmemory-policy other than noeviction, a key under memory pressure can
// vanish before its TTL and be granted to a second holder before the first
// one's renewal notices. A server that refuses CONFIG GET (ACLs, a renamed
// command, a proxy) is not checked.
func (d *redisDriver) checkEviction(ctx context.Context) {
	pipe := d.client.Pipeline()
	policy := pipe.ConfigGet(ctx, "maxmemory-policy")
	limit := pipe.ConfigGet(ctx, "maxmemory")
	if _, err := pipe.Exec(ctx); err != nil {
		d.logger.Debug("locker: redis: could not check maxmemory-policy", "err", err)
		return
	}
	if msg, bad := evictionRisk(policy.Val()["maxmemory-policy"], limit.Val()["maxmemory"]); bad {
		d.logger.Warn("locker: redis: "+msg, "maxmemory-policy", policy.Val()["maxmemory-policy"], "maxmemory", limit.Val()["maxmemory"])
	}
}

// evictionRisk says whether a server's eviction settings put lock keys at
// risk, and why.
func evictionRisk(policy, maxmemory string) (string, bool) {
	if policy == "" || policy == "noeviction" || maxmemory == "" || maxmemory == "0" {
		return "", false
	}
	return "lock keys can be evicted under memory pressure, letting a second holder in before the first one's renewal notices; set maxmemory-policy noeviction", true
}

// ttlArgs returns the PX argument for ttl, and its value in milliseconds.
func (d *redisDriver) ttlArgs(ttl time.Duration) (any, int64) {
	ms := millis(ttl)
	if ttl == d.ttl && d.ttlArg != nil {
		return d.ttlArg, ms
	}
	return ms, ms
}

// labelArgOf returns the label argument.
func (d *redisDriver) labelArgOf(label string) any {
	if l, ok := d.labelArg.(string); ok && l == label {
		return d.labelArg
	}
	return label
}

// millis converts a TTL to whole milliseconds (PX), at least 1.
func millis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// TryAcquire implements driver.Driver: one round trip (two the first time a
// server sees the script). It never queues: a free lock that has waiters
// goes to the first of them.
func (d *redisDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	ttlArg, ttl := d.ttlArgs(req.TTL)
	keys := scriptKeys(req.Key)
	r, err := d.attempt(ctx, req, keys, ttlArg, "0")
	if err != nil {
		return driver.Grant{}, err
	}
	if r <= 0 {
		return driver.Grant{}, driver.Held(time.Duration(max(-1-r, 0)) * time.Millisecond)
	}
	return driver.Grant{Token: uint64(r), Validity: time.Duration(ttl) * time.Millisecond, State: keys[0]}, nil
}

// attempt runs acquire.lua once: r > 0 is the token of a lock now held, r <=
// 0 means held by another owner for -r-1 more milliseconds (r = 0: unknown).
// seq is "0" for TryLock, else the attempt's number in a waiting Lock, which
// queues. On an error after which the lock may be ours, or the owner may be
// queued, it cleans up (see leave) before returning.
func (d *redisDriver) attempt(ctx context.Context, req driver.Request, keys []string, ttlArg any, seq string) (int64, error) {
	if req.Owner == "" || strings.IndexByte(req.Owner, ' ') >= 0 {
		return 0, driver.Permanent(fmt.Errorf("acquire: owner token %q is empty or contains a space", req.Owner))
	}
	reply, err := d.runAcquire(ctx, keys,
		req.Owner, ttlArg, d.labelArgOf(req.Label), d.retentionArg, seq, d.staleArg(req.TTL), d.channelArg(req.Key), d.lid, d.unfairArg)
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

// errNotReplicated is the error of an acquisition that Config.Replicas
// replicas did not confirm in time.
var errNotReplicated = errors.New("the lock did not reach the replicas in time")

// runAcquire runs acquire.lua with args. With Config.Replicas, a lock it
// took (a reply > 0) counts only once WAIT confirms it on the replicas:
// WAIT follows on the same connection, in one pipeline, and covers every
// write the primary had made before (the hand-over to this owner
// included). Otherwise it returns an error matching errNotReplicated, and
// the caller undoes the acquisition.
func (d *redisDriver) runAcquire(ctx context.Context, keys []string, args ...any) (any, error) {
	if d.replicas == 0 {
		return d.acquire.Run(ctx, d.client, keys, args...).Result()
	}
	for _, eval := range []func(context.Context, goredis.Scripter, []string, ...any) *goredis.Cmd{d.acquire.EvalSha, d.acquire.Eval} {
		pipe := d.client.Pipeline()
		cmd := eval(ctx, pipe, keys, args...)
		wait := pipe.Do(ctx, "WAIT", d.replicas, d.replicaTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx) // errors are per command
		if isNoScript(cmd.Err()) {
			continue
		}
		reply, err := cmd.Result()
		if err != nil || !took(reply) {
			return reply, err
		}
		switch n, err := wait.Int64(); {
		case err != nil:
			return reply, fmt.Errorf("%w: WAIT: %w", errNotReplicated, err)
		case n < int64(d.replicas):
			return reply, fmt.Errorf("%w: %d of %d replicas within %v", errNotReplicated, n, d.replicas, d.replicaTimeout)
		}
		return reply, nil
	}
	return nil, errors.New("the script cache dropped acquire.lua twice")
}

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
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(req.TTL, cleanupTimeout))
	defer cancel()
	if err := d.leaveQueue(ctx, req.Key, req.Owner); err != nil {
		d.logger.Warn("locker: redis: could not clean up after a failed or abandoned acquisition; retrying in the background",
			"key", req.Key, "err", err)
		key, owner := req.Key, req.Owner
		return &driver.Residue{Err: cause, Cleanup: func(ctx context.Context) error { return d.leaveQueue(ctx, key, owner) }}
	}
	return cause
}

// leaveQueue runs release.lua for owner with "leave": out of the queue, and
// the lock passed on if it was handed over to owner.
func (d *redisDriver) leaveQueue(ctx context.Context, key, owner string) error {
	_, err := d.runRelease(ctx, key, owner, "1")
	return classify(err)
}

// runRelease runs release.lua, with leave "1", "0" or "force", and returns 1 when
// owner's lock was released, 0 when owner held nothing. A release whose
// message the server refused counts as done (it is: the message is the
// script's last step), and switches the Locker to polling.
func (d *redisDriver) runRelease(ctx context.Context, key, owner, leave string) (int64, error) {
	n, err := d.release.Run(ctx, d.client, scriptKeys(key), owner, d.channelArg(key), d.retentionArg, leave, d.unfairArg).Int64()
	if n == 2 {
		d.noPubSub(errPublishRefused)
		n = 1
	}
	return n, err
}

// classify marks the Redis errors no retry can cure: a closed client,
// authentication and ACL refusals, and commands the server does not know or
// allow.
func classify(err error) error {
	if errors.Is(err, goredis.ErrClosed) {
		return driver.Permanent(err)
	}
	if hasPrefix(err, "NOAUTH", "WRONGPASS") || refused(err) {
		return driver.Permanent(err)
	}
	return err
}

// refused reports whether err is the server refusing a command: not
// allowed by ACL, or unknown (renamed away).
func refused(err error) bool {
	return hasPrefix(err, "NOPERM", "ERR unknown command", "ERR unknown subcommand")
}

// hasPrefix reports whether err is a reply from Redis that starts with one
// of prefixes.
func hasPrefix(err error, prefixes ...string) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	for _, p := range prefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// staleArg is how long (ms) a waiter may go without an attempt before it
// counts as gone: three of its refresh intervals.
func (d *redisDriver) staleArg(ttl time.Duration) any {
	if ttl == d.ttl && d.staleMs != nil {
		return d.staleMs
	}
	return millis(3 * refreshInterval(ttl))
}

// maybeExecuted reports whether a failed call may nevertheless have run on the
// server. It is false for a reply from Redis (an error reply is a definite
// answer), for a closed client and for errors raised before the command could
// be written (dial failures, an exhausted connection pool); true otherwise:
// a connection that broke or timed out after the command was written, or a
// ctx that ended while the reply was awaited.
func maybeExecuted(err error) bool {
	var rerr goredis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &rerr),
		errors.Is(err, goredis.ErrClosed),
		errors.Is(err, goredis.ErrPoolTimeout),
		errors.Is(err, goredis.ErrPoolExhausted),
		errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return true
}

// leaseKey returns the Redis key of a held lock.
func leaseKey(l driver.Lease) string {
	if k, ok := l.State.(string); ok {
		return k
	}
	return lockKey(l.Key)
}

// Release implements driver.Driver: compare-and-delete, or hand-over to the
// first waiter, with a message on the key's channel, in one script.
func (d *redisDriver) Release(ctx context.Context, l driver.Lease) error {
	n, err := d.runRelease(ctx, l.Key, l.Owner, "0")
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("release: %w", driver.ErrNotHeld)
	}
	return nil
}

// Break implements driver.Breaker (locker.ForceUnlock): release.lua without
// its owner check, so the key goes to the first waiter as on a release.
func (d *redisDriver) Break(ctx context.Context, key string) error {
	n, err := d.runRelease(ctx, key, "", "force")
	if err != nil {
		return fmt.Errorf("break: %w", classify(err))
	}
	if n == 0 {
		return fmt.Errorf("break: %w", driver.ErrNotHeld)
	}
	return nil
}

// Inspect implements driver.Inspector: the lock's value, its PTTL, the
// queue's length and the server's clock, in one pipeline. The token is the
// server's clock in µs at the acquisition (unless two acquisitions of the
// key fell in one µs), which gives Acquired.
func (d *redisDriver) Inspect(ctx context.Context, key string) (driver.Status, error) {
	ks := KeysOf(key)
	pipe := d.client.Pipeline()
	get := pipe.Get(ctx, ks.Lock)
	pttl := pipe.PTTL(ctx, ks.Lock)
	queued := pipe.ZCard(ctx, ks.Queue)
	now := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return driver.Status{}, fmt.Errorf("inspect: %w", classify(err))
	}
	st := driver.Status{Waiters: int(queued.Val())}
	v, err := get.Result()
	if errors.Is(err, goredis.Nil) {
		return st, nil
	}
	parts := strings.SplitN(v, " ", 3)
	if len(parts) < 2 {
		return st, fmt.Errorf("inspect: malformed lock value %q", v)
	}
	token, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return st, fmt.Errorf("inspect: malformed token in %q", v)
	}
	st.Held, st.Token = true, token
	if len(parts) == 3 {
		st.Label = parts[2]
	}
	st.Acquired = time.UnixMicro(int64(min(token, math.MaxInt64))).UTC()
	if ttl := pttl.Val(); ttl > 0 {
		st.Expires = now.Val().Add(ttl).UTC()
	}
	return st, nil
}

// Keep implements driver.Keeper (locker.MinHold): compare-and-PEXPIRE to
// remaining; nobody renews the key after that, and the waiters take it when
// it expires.
func (d *redisDriver) Keep(ctx context.Context, l driver.Lease, remaining time.Duration) error {
	n, err := d.renew.Run(ctx, d.client, []string{leaseKey(l)}, l.Owner, millis(remaining)).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("keep: %w", classify(err))
	case n == 0:
		return fmt.Errorf("keep: %w", driver.ErrNotHeld)
	}
	return nil
}

// Renew implements driver.Driver: compare-and-PEXPIRE.
func (d *redisDriver) Renew(ctx context.Context, l driver.Lease) (time.Duration, error) {
	ttlArg, ttl := d.ttlArgs(l.TTL)
	n, err := d.renew.Run(ctx, d.client, []string{leaseKey(l)}, l.Owner, ttlArg).Int64()
	return renewResult(ttl, n, err)
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
// leases (on a Cluster, go-redis sends one pipeline per node, in parallel).
func (d *redisDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	ttls := make([]int64, len(ls))
	args := make([]any, len(ls))
	for i, l := range ls {
		args[i], ttls[i] = d.ttlArgs(l.TTL)
	}
	cmds := renewPipelined(ctx, d.client, d.renew, ls, leaseKey, args)
	validity := make([]time.Duration, len(ls))
	errs := make([]error, len(ls))
	for i, c := range cmds {
		n, err := c.Int64()
		validity[i], errs[i] = renewResult(ttls[i], n, err)
	}
	return validity, errs, nil
}

// renewPipelined runs renew (renew.lua) for every lease in one pipeline on
// c, with the lock key key(ls[i]) and the TTL argument ttls[i], and sends
// the leases whose EVALSHA found the script missing from the server's cache
// again with EVAL in a second pipeline. Errors are per command.
func renewPipelined(ctx context.Context, c Master, renew *goredis.Script, ls []driver.Lease, key func(driver.Lease) string, ttls []any) []*goredis.Cmd {
	cmds := make([]*goredis.Cmd, len(ls))
	pipe := c.Pipeline()
	for i, l := range ls {
		cmds[i] = renew.EvalSha(ctx, pipe, []string{key(l)}, l.Owner, ttls[i])
	}
	_, execErr := pipe.Exec(ctx) // errors are per command, mostly
	blame(cmds, execErr)
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := c.Pipeline()
		for _, i := range again {
			cmds[i] = renew.Eval(ctx, pipe, []string{key(ls[i])}, ls[i].Owner, ttls[i])
		}
		_, execErr := pipe.Exec(ctx)
		blame(cmds, execErr)
	}
	return cmds
}

// blame gives the commands of a pipeline that go-redis left without a reply
// or an error the pipeline's error: go-redis sets none on the commands of a
// pipeline whose connection failed to initialise (a refused AUTH after a
// password rotation: WRONGPASS), and Int64 would blame a reply of type
// <nil>. The pipeline's error says why.
func blame(cmds []*goredis.Cmd, execErr error) {
	if execErr == nil {
		return
	}
	for _, c := range cmds {
		if c.Err() == nil && c.Val() == nil {
			c.SetErr(execErr)
		}
	}
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}

// Close implements driver.Driver: it closes the pub/sub connection and stops
// its goroutines. The client stays open.
func (d *redisDriver) Close() error {
	if d.stopCheck != nil {
		d.stopCheck()
		<-d.checked
	}
	d.notify.close()
	return nil
}
