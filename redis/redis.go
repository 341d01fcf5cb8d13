package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
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
	// long a write waits for its replicas (WAIT) before it fails (an
	// acquisition is then undone).
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
	//go:embed token.lua
	tokenLua string
	//go:embed watch.lua
	watchLua string
	//go:embed multi_release.lua
	multiReleaseLua string
)

// Client is the part of a go-redis v9 client the Locker uses: scripts,
// pipelines and pub/sub. *goredis.Client (a single node, or a Sentinel-managed
// primary from goredis.NewFailoverClient), *goredis.ClusterClient and every
// goredis.UniversalClient satisfy it, as do wrappers of them.
type Client interface {
	goredis.Scripter
	Pipeline() goredis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
}

// New returns a Locker that keeps its locks in Redis through client, the
// caller's own go-redis v9 client, which the Locker never closes. The options
// are the shared locker options (locker.WithTTL, locker.WithPrefix, …).
// The Locker uses client as given (RESP2 or RESP3, its timeouts, its pool),
// except for renewals: on a *goredis.Client (one node, or Sentinel's
// failover client) or a *goredis.ClusterClient, they run on a client of
// the Locker's own, made from client's Options with one connection per
// server, so that they never wait behind the caller's commands for a
// connection of its pools. That client does not run the hooks added to
// client (AddHook), and closing client does not end it: Close the Locker.
// [Config.OwnClient] runs every call on a client of the Locker's own.
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

	// NoPubSub makes the Locker work without pub/sub from the start: its
	// waiting Locks poll, and only its releases publish, to wake the
	// waiters of Lockers with pub/sub (see the package doc,
	// Waiting without pub/sub). Set it for a deployment known to refuse
	// PUBLISH or SUBSCRIBE (ACL -@pubsub or resetchannels, rename-command,
	// a proxy without pub/sub); without it the Locker switches by itself
	// at the first refusal.
	NoPubSub bool

	// NoInbox makes the Locker's waiters confirm every hand-over with an
	// attempt, as on a Cluster, instead of reading it from the Locker's
	// inbox list (see the package doc). Set it behind a proxy that shards
	// by key: the scripts write the inbox on the lock's shard, where the
	// Locker's BLPOP does not look.
	NoInbox bool

	// Replicas, when above 0, makes an acquisition (a lock taken, or
	// confirmed by the waiter it was handed over to) count only once
	// Redis's WAIT confirms that at least Replicas replicas have the write,
	// within ReplicaTimeout. When they do not, the acquisition is undone
	// (the key passed on or freed) and reported as a store error: TryLock
	// returns it, a waiting Lock queues again. With it, a lock granted
	// survives a failover to any of those replicas (see the package doc,
	// Replicated before granted). Renewals, SetData, SetLimit, the keep of
	// a MinHold and ForceUnlock wait for the replicas too; a release does
	// not. It needs a client of one primary (goredis.NewClient, or
	// goredis.NewFailoverClient for Sentinel): WAIT must run on the
	// connection of the write, which a Cluster client does not promise.
	Replicas int

	// Unfair makes the Locker's locks barging instead of first come, first
	// served: a release frees the key and wakes only the first waiter (one
	// message, to its Locker; not again within a millisecond of waking
	// it: it tries again by itself then), and a free key goes to whoever
	// asks first, a waiter woken or a Locker just asking (the one that
	// released it, looping, often). A first waiter whose wake-up found
	// the key taken again tries every millisecond while the key keeps
	// changing hands, instead of waiting for the next message. A release
	// of a LockMulti's contended keys wakes the first waiter 2 ms later,
	// unless the releasing Locker takes the keys again before; a run of
	// such releases ends after 5 ms, and the Locker then waits behind the
	// others. A hot key then changes hands without a wake-up on the
	// critical path, at the price of order: a waiter may be overtaken,
	// as with Redisson's RLock beside its RFairLock. A first waiter that
	// has waited a millisecond or longer and is not trying by itself (woken
	// within the last millisecond, or polling) is handed the key by the
	// next release instead, as a fair release does, at most once per 10 ms
	// per key: like sync.Mutex's starvation mode, this bounds how long a
	// sleeping waiter is passed over. The default is fair (see the package
	// doc, Fair and unfair).
	// Lockers of both kinds may share a key.
	Unfair bool

	// ReplicaTimeout bounds the WAIT of Replicas (default
	// [DefaultReplicaTimeout]; at most a third of the TTL, since the
	// lock's validity counts from before the acquisition), and below the
	// client's ReadTimeout, which WAIT's reply must also meet: New refuses
	// a *redis.Client whose ReadTimeout it does not beat.
	ReplicaTimeout time.Duration

	// OwnClient makes the Locker run every call on a client of its own,
	// made from the Options of client, a *goredis.Client (one node, or
	// Sentinel's failover client): the same address or dialling,
	// credentials, TLS, OnConnect, timeouts, pool sizes and protocol. The
	// Locker's calls then run as on a Locker from [Open]: a call whose ctx
	// can end runs in its caller's goroutine on a connection of its own,
	// which the Locker closes when the ctx ends, and the call returns at
	// once. The caller's commands no longer share a pool with the
	// Locker's. The Locker's client does not run the hooks added to
	// client (AddHook), nor its push handlers, maintenance notifications
	// or client-side cache. Closing client does not end the Locker's
	// connections: Close the Locker. On Sentinel's failover client, the
	// Locker's client asks client's sentinels for the primary at each
	// dial: close client only after the Locker. New refuses OwnClient
	// with any other client, which keeps its calls on client.
	OwnClient bool
}

// New returns a Locker as the package-level [New] does, with c.
func (c Config) New(client Client, opts ...locker.Option) (_ locker.Locker, err error) {
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
	if _, single := client.(*goredis.Client); c.OwnClient && !single {
		bad = fmt.Errorf("Config.OwnClient needs a *redis.Client (redis.NewClient, redis.NewFailoverClient), not %T", client)
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
	if c.OwnClient {
		o := ownOptions(client.(*goredis.Client))
		own := newOwnedClient(&o)
		client = own
		opts = append(opts[:len(opts):len(opts)], locker.WithOnClose(own.Close))
		defer func() {
			if err != nil {
				_ = own.Close()
			}
		}()
	}
	// WAIT answers only when its timeout ends: a client that stops reading
	// first drops the connection, and the write's outcome is then a network
	// error instead of "not replicated".
	cl, ok := client.(*goredis.Client)
	if oc, owned := client.(*ownedClient); owned {
		cl, ok = oc.Client, true
	}
	if ok && c.Replicas > 0 {
		if rt := cl.Options().ReadTimeout; rt > 0 && replicaTimeout >= rt {
			return nil, &locker.Error{Op: "new", Backend: "redis", Err: locker.ErrInvalidOption,
				Cause: fmt.Errorf("Config.ReplicaTimeout %v is not below the client's ReadTimeout %v", replicaTimeout, rt)}
		}
	}
	d := newDriver(client)
	d.retentionArg = strconv.FormatInt(retention.Milliseconds(), 10)
	d.poll.Store(c.NoPubSub)
	if c.NoInbox {
		d.inbox = nil
	}
	if c.Unfair {
		d.unfairArg = "1"
	}
	d.replicas, d.replicaTimeout = c.Replicas, replicaTimeout
	if rc, closeRC := renewalClient(client); rc != nil {
		d.renewer, d.closeRenewer = rc, closeRC
	}
	l, err := locker.New(d, opts...)
	if err != nil && d.closeRenewer != nil {
		_ = d.closeRenewer()
	}
	return l, err
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

// noOptions runs a client's Options check; a zero *goredis.Client panics in
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
	setData *goredis.Script // setdata.lua
	// The scripts of shared holds (shared.go).
	shareAcquire, shareRelease, shareRenew *goredis.Script
	// multiAcquire takes several locks at once (multi.go), and
	// multiRelease releases them (multi_release.go).
	multiAcquire, multiRelease *goredis.Script
	// multiGiveUp gives up a next wait nobody adopted (multi_next.go).
	multiGiveUp *goredis.Script

	// renewer runs the renewals: a client of the Locker's own
	// (renewalClient), closed by closeRenewer, or client.
	renewer      Master
	closeRenewer func() error

	logger *slog.Logger
	notify *notifier
	inbox  *inbox // nil: hand-overs are confirmed by an attempt
	// lid names this Locker in its waiters' records: a hand-over is
	// announced on the key's channel .. ":" .. lid, which only this
	// Locker's notifier subscribes.
	lid    string
	lidArg any // lid, boxed once for the scripts' arguments
	// waits numbers the waits of LockMulti that record themselves with
	// the keys they find held (watchField): each has a field of its own.
	waits atomic.Uint64
	// next are the waits that releases recorded for this Locker's next
	// LockMulti (multi_next.go).
	next nextWaits
	// defers are the wake-ups this Locker's releases deferred
	// (multi_defer.go).
	defers deferrals

	// poll is set once the Locker works without pub/sub (Config.NoPubSub,
	// or the server refused it): scripts get no channel and waiters poll
	// with backoff, the Locker's.
	poll    atomic.Bool
	backoff driver.Backoff

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

	// direct are the scripts runScript may send as commands of its own,
	// through proc: the client when it is a go-redis *Client or
	// *ClusterClient, or an owned client, else nil (see eval.go).
	direct map[*goredis.Script]scriptArgs
	proc   processor

	// closing is the Done of the Locker's driver.Config.Closing when the
	// client cuts calls (an owned client), else nil.
	closing <-chan struct{}

	// names are the lockNames of the store keys used last (lockNames),
	// shares their shareStates (shareState).
	names  namesCache[lockNames, *lockNames]
	shares namesCache[shareState, *shareState]

	// The eviction check started by Configure; Close stops and waits.
	stopCheck context.CancelFunc
	checked   chan struct{}
}

// include inserts lib.lua where a script says "-- #include lib.lua",
// token.lua where lib.lua says so, and watch.lua where the script says so.
func include(script string) string {
	return includeWatch(includeToken(includeKind(strings.Replace(script, "-- #include lib.lua\n", libLua, 1))))
}

// includeKind inserts sharekind.lua where a script says "-- #include
// sharekind.lua".
func includeKind(script string) string {
	return strings.Replace(script, "-- #include sharekind.lua\n", shareKindLua, 1)
}

// includeToken inserts token.lua where a script says "-- #include
// token.lua".
func includeToken(script string) string {
	return strings.Replace(script, "-- #include token.lua\n", tokenLua, 1)
}

func includeWatch(script string) string {
	return strings.Replace(script, "-- #include watch.lua\n", watchLua, 1)
}

func newDriver(client Client) *redisDriver {
	logger := slog.New(slog.DiscardHandler)
	d := &redisDriver{
		client:  client,
		renewer: client,
		renew:   goredis.NewScript(renewLua),
		setData: goredis.NewScript(setDataLua),

		shareRenew: goredis.NewScript(shareRenewLua),
		logger:     logger,

		retentionArg: strconv.FormatInt(FenceRetention.Milliseconds(), 10),
		lid:          newLockerID(),
		unfairArg:    "0",
	}
	d.lidArg = d.lid
	d.names.seed, d.shares.seed = maphash.MakeSeed(), maphash.MakeSeed()
	d.acquire, d.release = d.newScript(include(acquireLua)), d.newScript(include(releaseLua))
	d.shareAcquire, d.shareRelease = d.newScript(includeShared(shareAcquireLua)), d.newScript(includeShared(shareReleaseLua))
	d.multiAcquire, d.multiRelease = d.newScript(includeKind(multiAcquireLua)), d.newScript(includeWatch(multiReleaseLua))
	d.multiGiveUp = d.newScript(includeWatch(multiGiveUpLua))
	switch c := client.(type) {
	case *goredis.Client:
		d.proc = c
	case *goredis.ClusterClient:
		d.proc = c
	case *ownedClient:
		d.proc = c
	}
	d.notify = newNotifier(client, logger, d.noPubSub, d.lid)
	d.inbox = newInbox(client, d.lid, logger)
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

// channelArgOf is channelArg for the lock names n, boxed.
func (d *redisDriver) channelArgOf(n *lockNames) any {
	if d.poll.Load() {
		return ""
	}
	return n.channelArg
}

// Info implements driver.Driver.
func (d *redisDriver) Info() driver.Info {
	return driver.Info{Name: "redis", MaxKeyBytes: MaxKeyBytes, PerLockTTL: true, PromptCancel: d.cutsCalls()}
}

// Configure implements driver.Configurer: it takes the logger, prepares
// the script arguments that are the same for every lock, and gives an
// owned client the pool of the calls that end only at Close.
func (d *redisDriver) Configure(_ context.Context, cfg driver.Config) error {
	if cfg.Logger != nil {
		d.logger = cfg.Logger
		d.notify.logger = cfg.Logger
		d.inbox.setLogger(cfg.Logger)
	}
	if d.replicas > 0 && d.replicaTimeout > cfg.TTL/3 {
		return fmt.Errorf("%w: Config.ReplicaTimeout %v is above a third of the TTL %v", locker.ErrInvalidOption, d.replicaTimeout, cfg.TTL)
	}
	if oc, ok := d.client.(*ownedClient); ok && cfg.Closing != nil {
		oc.closeWith(cfg.Closing)
		d.closing = cfg.Closing.Done()
	}
	d.backoff = cfg.Backoff
	d.ttl = cfg.TTL
	d.ttlArg = strconv.FormatInt(millis(cfg.TTL), 10)
	d.labelArg = cfg.Label
	d.staleMs = strconv.FormatInt(millis(staleAfter(cfg.TTL)), 10)
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

// staleArg is staleAfter(ttl) in milliseconds.
func (d *redisDriver) staleArg(ttl time.Duration) any {
	if ttl == d.ttl && d.staleMs != nil {
		return d.staleMs
	}
	return millis(staleAfter(ttl))
}

// Close implements driver.Driver: CloseContext within writeTimeout.
func (d *redisDriver) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return d.CloseContext(ctx)
}

// CloseContext implements driver.ContextCloser: it closes the pub/sub
// connection and the renewal client and stops its goroutines, waiting for
// the inbox reader until ctx ends. The caller's client stays open.
func (d *redisDriver) CloseContext(ctx context.Context) error {
	if d.stopCheck != nil {
		d.stopCheck()
		<-d.checked
	}
	d.wakeAllOwed(ctx)
	d.watchAll() // multi_next.go: the next waits' goroutines, which close stops
	d.notify.close()
	d.inbox.close(ctx)
	if d.closeRenewer != nil {
		_ = d.closeRenewer()
	}
	return nil
}
