package zookeeper

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver"
)

const (
	// protectedPrefix and lockMarker frame the GUID of a lock node's name,
	// as Curator and go-zookeeper's CreateProtectedEphemeralSequential do:
	// _c_<32 hex digits>-lock-<sequence>.
	protectedPrefix = "_c_"
	lockMarker      = "-lock-"
	guidLen         = 32

	// maxParentAttempts bounds how often a create retries after finding
	// the key's parent missing (ZooKeeper deletes empty container nodes).
	maxParentAttempts = 5

	// multiBudget bounds the encoded size of one renewal multi-operation,
	// well under ZooKeeper's default jute.maxbuffer of 1 MiB.
	multiBudget = 256 << 10

	// sweepWorkers bounds the concurrent deletions of one janitor sweep.
	sweepWorkers = 16
)

// errNodeGone means the waiter's or holder's own node vanished: its session
// expired or someone deleted it.
var errNodeGone = errors.New("zookeeper: our lock node vanished (session expired or node deleted)")

// ErrForeignNode is the cause of the errors of a lock whose key's node
// holds a node no Locker made: a child whose name is not a lock node's, or a
// lock node's name on a node that is not ephemeral. Such a node is never
// deleted by the Locker and would block the key for good: the error names
// it, and an operator must delete it.
var ErrForeignNode = errors.New("zookeeper: a node no Locker made is in a key's queue: delete it")

// ErrConnClosed is the cause (with locker.ErrLost) of the locks lost when the
// connection's event channel closes, that is when the connection was closed
// under the Locker.
var ErrConnClosed = errors.New("zookeeper: connection closed")

// holdState is the life cycle of a hold, changed with compare-and-swap.
type holdState int32

const (
	holdHeld  holdState = iota // granted, renewed by the engine
	holdEnded                  // released, lost or given up
)

// hold is the driver's state of one held lock (Grant.State, Lease.State).
type hold struct {
	path    string // the lock node
	session int64  // the session the node belongs to
	lost    func(error)
	state   atomic.Int32
}

// end moves h from held to ended; only the first call reports true.
func (h *hold) end() bool {
	return h.state.CompareAndSwap(int32(holdHeld), int32(holdEnded))
}

func (h *hold) held() bool { return holdState(h.state.Load()) == holdHeld }

// orphan is a node of ours that must be deleted: a waiter or holder whose
// cleanup failed, or whose create was still in flight when its caller gave
// up.
type orphan struct {
	parent string
	guid   string
	path   string                            // "" when unknown: search the parent for guid
	create <-chan result[[]zk.MultiResponse] // non-nil while the create is in flight
}

// result is the outcome of a go-zookeeper call run in a goroutine.
type result[T any] struct {
	v   T
	err error
}

// zkDriver implements driver.Driver, driver.Acquirer, driver.BatchRenewer and
// driver.Configurer on one go-zookeeper connection.
type zkDriver struct {
	conn    *zk.Conn
	events  <-chan zk.Event // nil when the caller gave none
	root    string
	acl     []zk.ACL // of the container nodes: Root, its ancestors, the key nodes
	lockACL []zk.ACL // of the lock nodes

	// Set by Configure, read-only afterwards.
	ttl    time.Duration
	logger *slog.Logger

	// validity is how long a lock is counted on after a request that
	// proved its session alive: the TTL, or the session timeout the server
	// granted when that is shorter (in nanoseconds).
	validity atomic.Int64

	ctx    context.Context // cancelled by Close: ends janitor sweeps
	cancel context.CancelFunc
	stop   chan struct{}  // closed by Close
	wg     sync.WaitGroup // the events and janitor goroutines
	calls  sync.WaitGroup // go-zookeeper calls running in goroutines of their own

	connClosed atomic.Bool // the events channel was closed

	mu      sync.Mutex
	holds   map[*hold]struct{}
	orphans []*orphan
	// keeps are the timers that delete kept lock nodes when their MinHold
	// ends (Keep); Close stops them and leaves the nodes to the session.
	keeps map[*time.Timer]struct{}
}

func newDriver(conn *zk.Conn, events <-chan zk.Event, root string, acl []zk.ACL) *zkDriver {
	ctx, cancel := context.WithCancel(context.Background())
	return &zkDriver{
		conn:    conn,
		events:  events,
		root:    root,
		acl:     acl,
		lockACL: acl,
		logger:  slog.New(slog.DiscardHandler),
		ctx:     ctx,
		cancel:  cancel,
		stop:    make(chan struct{}),
		holds:   make(map[*hold]struct{}),
	}
}

// Info implements driver.Driver.
func (d *zkDriver) Info() driver.Info {
	return driver.Info{Name: backendName, MaxKeyBytes: MaxKeyBytes}
}

// Configure implements driver.Configurer: it records the TTL and starts the
// goroutines that follow the session and clean up orphaned nodes.
//
// When the connection has a session already, the session timeout the server
// granted must be at least the TTL: the server forgets a silent session's
// nodes after that timeout, so a shorter one would let another process in
// while the holder still counts on its lock.
func (d *zkDriver) Configure(_ context.Context, cfg driver.Config) error {
	d.ttl = cfg.TTL
	d.validity.Store(int64(cfg.TTL))
	if cfg.Logger != nil {
		d.logger = cfg.Logger
	}
	if d.conn.State() == zk.StateHasSession {
		if granted, ok := grantedTimeout(d.conn); ok && granted < cfg.TTL {
			return fmt.Errorf("%w WithTTL: %v is longer than the session timeout of %v the ZooKeeper server granted this connection; connect with a session timeout of at least the TTL (the server's maxSessionTimeout caps it), or lower the TTL",
				locker.ErrInvalidOption, cfg.TTL, granted)
		}
	}
	if d.events != nil {
		d.wg.Add(1)
		go d.watchEvents()
	}
	d.wg.Add(1)
	go d.janitor()
	return nil
}

// grantedTimeout returns the session timeout the server granted conn in its
// last handshake. go-zookeeper does not export it: this reads its field,
// which it writes before it reports StateHasSession (so reading it after
// seeing that state, or that event, is ordered after the write).
// TestGrantedSessionTimeout fails if the field ever goes away.
func grantedTimeout(conn *zk.Conn) (time.Duration, bool) {
	f := reflect.ValueOf(conn).Elem().FieldByName("sessionTimeoutMs")
	if !f.IsValid() || f.Kind() != reflect.Int32 || f.Int() <= 0 {
		return 0, false
	}
	return time.Duration(f.Int()) * time.Millisecond, true
}

// sessionGranted takes in the timeout of a new session: the validity of the
// locks on it is the TTL, or the granted timeout when that is shorter (the
// server forgets a silent session's nodes after it).
func (d *zkDriver) sessionGranted() {
	granted, ok := grantedTimeout(d.conn)
	if !ok {
		return
	}
	v := min(granted, d.ttl)
	if old := time.Duration(d.validity.Swap(int64(v))); v < d.ttl && old != v {
		d.logger.Warn("locker: zookeeper granted a session timeout shorter than the TTL; locks count on the shorter one",
			"granted", granted, "ttl", d.ttl)
	}
}

// cleanupTimeout bounds a cleanup done with a fresh context.
func (d *zkDriver) cleanupTimeout() time.Duration {
	return min(max(d.ttl, 500*time.Millisecond), 5*time.Second)
}

// cleanupContext is a context for cleaning up after ctx ended or failed: not
// cancelled with ctx, bounded by cleanupTimeout.
func (d *zkDriver) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d.cleanupTimeout())
}

// start runs f, a blocking go-zookeeper call, in a goroutine of its own and
// returns the channel that receives its outcome.
func start[T any](d *zkDriver, f func() (T, error)) <-chan result[T] {
	ch := make(chan result[T], 1)
	d.calls.Add(1)
	go func() {
		defer d.calls.Done()
		v, err := f()
		ch <- result[T]{v, err}
	}()
	return ch
}

// call runs f and returns its outcome, or ctx's error as soon as ctx ends:
// go-zookeeper calls cannot be cancelled, so f then finishes in the
// background and its outcome is dropped.
func call[T any](ctx context.Context, d *zkDriver, f func() (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	select {
	case r := <-start(d, f):
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// call0 is call for go-zookeeper calls that return only an error.
func call0(ctx context.Context, d *zkDriver, f func() error) error {
	_, err := call(ctx, d, func() (struct{}, error) { return struct{}{}, f() })
	return err
}

// parentOf returns the parent node of a store key's lock queue.
func (d *zkDriver) parentOf(key string) string { return QueuePath(d.root, key) }

// newGUID returns 32 random hex digits.
func newGUID() string {
	var b [guidLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// TryAcquire implements driver.Driver.
func (d *zkDriver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.acquire(ctx, req, false)
	return g, classify(err)
}

// classify marks the ZooKeeper errors no retry can cure: authentication and
// ACL refusals, and bad arguments.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed), errors.Is(err, zk.ErrBadArguments),
		errors.Is(err, zk.ErrInvalidACL), errors.Is(err, zk.ErrInvalidPath), errors.Is(err, zk.ErrClosing),
		errors.Is(err, ErrConnClosed), errors.Is(err, ErrForeignNode):
		return driver.Permanent(err)
	}
	return err
}

// Acquire implements driver.Acquirer: it queues behind the current holder
// and earlier waiters, and waits for its turn.
func (d *zkDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.acquire(ctx, req, true)
	return g, classify(err)
}

func (d *zkDriver) acquire(ctx context.Context, req driver.Request, wait bool) (driver.Grant, error) {
	parent := d.parentOf(req.Key)
	guid := newGUID()
	session := d.conn.SessionID()
	sent := time.Now()
	node, pstat, err := d.create(ctx, parent, guid, []byte(req.Label))
	if err != nil {
		return driver.Grant{}, err
	}
	if s := d.conn.SessionID(); s != session || s == 0 {
		// The session changed during the create: ask the node which one it
		// belongs to.
		session, err = d.ownerOf(ctx, node)
		if err != nil {
			d.cleanup(ctx, parent, guid, node)
			return driver.Grant{}, err
		}
	}
	if pstat.NumChildren == 1 { // ours is the only node: the lock is ours
		return d.grant(ctx, req, parent, guid, node, session, pstat.Mzxid, sent)
	}
	if !wait {
		// The queue is listed along with the delete (no added round trip):
		// a foreign child would make every TryLock of the key fail as
		// "held" without a word.
		list := start(d, func() ([]string, error) {
			c, _, err := d.conn.Children(parent)
			return c, err
		})
		d.cleanup(ctx, parent, guid, node)
		select {
		case r := <-list:
			if f := foreignChild(r.v, node[len(parent)+1:]); r.err == nil && f != "" {
				return driver.Grant{}, fmt.Errorf("%w: %s/%s is not a lock node", ErrForeignNode, parent, f)
			}
		case <-ctx.Done():
		}
		return driver.Grant{}, driver.Held(0)
	}
	since, waited, err := d.waitTurn(ctx, parent, node, sent)
	if err != nil {
		d.cleanup(ctx, parent, guid, node)
		return driver.Grant{}, err
	}
	g, err := d.grant(ctx, req, parent, guid, node, session, pstat.Mzxid, since)
	g.Queued = waited
	return g, err
}

// create adds our node to the queue of parent, creating parent when it is
// missing, in one multi-operation that also sets parent's (empty) data: the
// reply's stat of parent gives the number of nodes in the queue and, as its
// mzxid, the zxid of our create, our fencing token. On any failure it
// removes what it may have created before returning.
func (d *zkDriver) create(ctx context.Context, parent, guid string, data []byte) (string, *zk.Stat, error) {
	ops := []any{
		&zk.CreateRequest{Path: parent + "/" + protectedPrefix + guid + lockMarker, Data: data, Acl: d.lockACL, Flags: zk.FlagEphemeral | zk.FlagSequence},
		&zk.SetDataRequest{Path: parent, Data: nil, Version: -1},
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return "", nil, err
		}
		ch := start(d, func() ([]zk.MultiResponse, error) { return d.conn.Multi(ops...) })
		var r result[[]zk.MultiResponse]
		select {
		case r = <-ch:
		case <-ctx.Done():
			d.abandonCreate(ctx, parent, guid, ch)
			return "", nil, ctx.Err()
		}
		node, stat, err := createOutcome(r)
		switch {
		case err == nil:
			return node, stat, nil
		case errors.Is(err, zk.ErrNoNode) && attempt < maxParentAttempts:
			if err := d.ensureParent(ctx, parent); err != nil {
				return "", nil, err
			}
			continue
		case mayHaveApplied(err):
			d.cleanup(ctx, parent, guid, "")
		}
		return "", nil, fmt.Errorf("create a lock node under %s: %w", parent, createDenied(r, parent, err))
	}
}

// createDenied explains a create multi-operation refused by the ACL of the
// key's node: which permission it lacks. Other errors are returned as they
// are.
func createDenied(r result[[]zk.MultiResponse], parent string, err error) error {
	if len(r.v) == 2 && errors.Is(r.v[1].Error, zk.ErrNoAuth) {
		return denied(err, parent, "WRITE")
	}
	return denied(err, parent, "CREATE")
}

// denied explains zk.ErrNoAuth from a call on node p: the ACL of p does not
// grant this connection's identity perm. Other errors are returned as they
// are.
func denied(err error, p, perm string) error {
	if !errors.Is(err, zk.ErrNoAuth) {
		return err
	}
	return fmt.Errorf("the ACL of %s does not grant this connection %s (see zookeeper.Config.ACL; was it changed, or made by another identity?): %w", p, perm, err)
}

// foreignChild returns a child of a key's node, other than our own node
// mine, whose name is not a lock node's, when no lock node is ahead of mine:
// the reason our node was not alone. It returns "" otherwise.
func foreignChild(children []string, mine string) string {
	seq, ok := sequenceOf(mine)
	if !ok {
		return ""
	}
	foreign := ""
	for _, c := range children {
		s, ok := sequenceOf(c)
		switch {
		case !ok:
			foreign = c
		case s < seq:
			return ""
		}
	}
	return foreign
}

// createOutcome reads the reply of create's multi-operation.
func createOutcome(r result[[]zk.MultiResponse]) (string, *zk.Stat, error) {
	if r.err != nil {
		return "", nil, r.err
	}
	if len(r.v) != 2 || r.v[0].String == "" || r.v[1].Stat == nil {
		return "", nil, fmt.Errorf("zookeeper: unexpected reply to a create multi-operation: %d results", len(r.v))
	}
	return r.v[0].String, r.v[1].Stat, nil
}

// mayHaveApplied reports whether a write that failed with err may still have
// been applied: true unless the server refused it, or the session (and so
// every ephemeral node it could have created) is gone.
func mayHaveApplied(err error) bool {
	for _, definite := range []error{
		zk.ErrNoNode, zk.ErrNoAuth, zk.ErrInvalidACL, zk.ErrBadArguments, zk.ErrNodeExists,
		zk.ErrNoChildrenForEphemerals, zk.ErrBadVersion, zk.ErrNotEmpty, zk.ErrSessionExpired,
		zk.ErrAPIError, zk.ErrInvalidPath, zk.ErrInvalidFlags,
	} {
		if errors.Is(err, definite) {
			return false
		}
	}
	return true
}

// abandonCreate cleans up after a create whose caller's ctx ended while it
// was in flight: the node is deleted once the create's outcome is known, at
// once if it is known within the cleanup timeout, else by the janitor.
// Deleting before the create's reply came could run ahead of the create and
// leave the node behind.
func (d *zkDriver) abandonCreate(ctx context.Context, parent, guid string, ch <-chan result[[]zk.MultiResponse]) {
	cctx, cancel := d.cleanupContext(ctx)
	defer cancel()
	select {
	case r := <-ch:
		o := settleCreate(parent, guid, r)
		if o != nil {
			if err := d.deleteOrphan(cctx, o); err != nil {
				d.addOrphan(o)
			}
		}
	case <-cctx.Done():
		d.addOrphan(&orphan{parent: parent, guid: guid, create: ch})
	}
}

// settleCreate turns the outcome of an abandoned create into the orphan to
// delete, or nil when nothing was created.
func settleCreate(parent, guid string, r result[[]zk.MultiResponse]) *orphan {
	node, _, err := createOutcome(r)
	switch {
	case err == nil:
		return &orphan{parent: parent, guid: guid, path: node}
	case mayHaveApplied(err):
		return &orphan{parent: parent, guid: guid}
	}
	return nil
}

// ensureParent creates the key's parent container node, and the root's
// missing nodes when needed.
func (d *zkDriver) ensureParent(ctx context.Context, parent string) error {
	err := d.createContainer(ctx, parent)
	if !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	for _, p := range ancestors(d.root) {
		if err := d.createContainer(ctx, p); err != nil {
			return err
		}
	}
	return d.createContainer(ctx, parent)
}

// createContainer creates a container node at p; an existing node is fine.
func (d *zkDriver) createContainer(ctx context.Context, p string) error {
	_, err := call(ctx, d, func() (string, error) { return d.conn.CreateContainer(p, nil, zk.FlagContainer, d.acl) })
	if err == nil || errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return fmt.Errorf("create container node %s: %w", p, err)
}

// ownerOf returns the session that owns the ephemeral node p.
func (d *zkDriver) ownerOf(ctx context.Context, p string) (int64, error) {
	type exists struct {
		ok   bool
		stat *zk.Stat
	}
	r, err := call(ctx, d, func() (exists, error) {
		ok, st, err := d.conn.Exists(p)
		return exists{ok, st}, err
	})
	switch {
	case err != nil:
		return 0, fmt.Errorf("stat %s: %w", p, err)
	case !r.ok:
		return 0, errNodeGone
	}
	return r.stat.EphemeralOwner, nil
}

// waitTurn waits until node is the first of parent's queue. It returns a
// moment after which the session was alive, for the grant's validity, and
// whether it waited for another node to go.
//
// Each round lists the queue and watches the node just before ours (pred)
// and the one before that (pp): a deletion wakes at most two waiters, never
// the whole queue. A hand-off costs one message from the server, with no
// round trip after it:
//
//   - When pred was first in line in our last listing, no other node is
//     ahead of ours (later nodes get higher sequence numbers; a listing,
//     from any server, shows every node before ours that still exists, as
//     it comes after our create in the session's order): its deletion
//     makes ours first, and the lock is ours when the event arrives.
//   - When pp goes, we list the queue again, while pred, now usually the
//     holder, still holds: so by the time pred goes we know it was first,
//     and the first case applies. A deletion of pred while pp was there
//     (pred gave up) also makes us list again.
//
// Proof of life: the create was a write, which the leader accepts only
// while the session lives, so its send time (sent) is such a moment. While
// that proof is fresh (younger than a quarter of the validity, so that the
// grant leaves the engine its whole renewal schedule) a round needs no
// other, and only a fresh proof lets a deletion event grant the lock. A
// round after a longer wait syncs with the leader, sent with the list in
// the same round trip: a sync the leader answers proves the session alive
// after it was sent. A list from any server, however far behind the
// leader, that shows no node before ours shows the leader none either
// (nodes before ours are only ever deleted), so the list needs not wait for
// the sync.
func (d *zkDriver) waitTurn(ctx context.Context, parent, node string, sent time.Time) (since time.Time, waited bool, err error) {
	name := node[len(parent)+1:]
	seq, ok := sequenceOf(name)
	if !ok {
		return time.Time{}, false, fmt.Errorf("zookeeper: unexpected lock node name %q", name)
	}
	since = sent
	// The watches set and not fired yet, by node name: a node watched in
	// one round and still there in the next is not watched again.
	watches := map[string]<-chan zk.Event{}
	for {
		var synced <-chan result[string]
		if !d.fresh(since) {
			since = time.Now()
			synced = start(d, func() (string, error) { return d.conn.Sync(parent) })
		}
		children, err := call(ctx, d, func() ([]string, error) {
			c, _, err := d.conn.Children(parent)
			return c, err
		})
		if err != nil {
			return time.Time{}, false, fmt.Errorf("list the queue %s: %w", parent, denied(err, parent, "READ"))
		}
		if synced != nil {
			select {
			case r := <-synced:
				if r.err != nil {
					return time.Time{}, false, fmt.Errorf("sync %s: %w", parent, r.err)
				}
			case <-ctx.Done():
				return time.Time{}, false, ctx.Err()
			}
		}
		pred, found := predecessor(children, name, seq)
		if !found {
			return time.Time{}, false, errNodeGone
		}
		if pred == "" {
			return since, waited, nil
		}
		// The node before pred, "" when pred is first in line.
		pp, _ := predecessor(children, pred, mustSequence(pred))
		if err := d.watchAll(ctx, parent, watches, pred, pp); err != nil {
			if errors.Is(err, zk.ErrNoNode) {
				continue // gone already: look again
			}
			return time.Time{}, false, err
		}
		select {
		case ev := <-watches[pred]:
			delete(watches, pred)
			if ev.Err != nil {
				return time.Time{}, false, fmt.Errorf("watch %s/%s: %w", parent, pred, ev.Err)
			}
			waited = true
			if pp == "" && ev.Type == zk.EventNodeDeleted && d.fresh(since) {
				return since, true, nil
			}
		case ev := <-watches[pp]: // never ready when pp is "": a nil channel
			delete(watches, pp)
			if ev.Err != nil {
				return time.Time{}, false, fmt.Errorf("watch %s/%s: %w", parent, pp, ev.Err)
			}
			waited = true
		case <-ctx.Done():
			return time.Time{}, false, ctx.Err()
		}
	}
}

// mustSequence is sequenceOf for a name predecessor returned (a lock
// node's, so it parses).
func mustSequence(name string) int64 {
	s, _ := sequenceOf(name)
	return s
}

// watchAll sets a watch on each of the nodes names of parent ("" skipped)
// that has none pending in watches, in parallel, and records them there.
func (d *zkDriver) watchAll(ctx context.Context, parent string, watches map[string]<-chan zk.Event, names ...string) error {
	type set struct {
		name string
		r    <-chan result[<-chan zk.Event]
	}
	var sets []set
	for _, n := range names {
		if n == "" || watches[n] != nil {
			continue
		}
		p := parent + "/" + n
		sets = append(sets, set{n, start(d, func() (<-chan zk.Event, error) { return d.watch(p) })})
	}
	var first error
	for _, s := range sets {
		select {
		case r := <-s.r:
			switch {
			case r.err == nil:
				watches[s.name] = r.v
			case errors.Is(r.err, zk.ErrNoNode):
				first = cmp.Or(first, r.err)
			default:
				first = fmt.Errorf("watch %s/%s: %w", parent, s.name, r.err)
				return first
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

// fresh reports whether a proof of the session's life sent at since is
// young enough to grant a lock on: younger than a quarter of the validity,
// so that the grant leaves the engine its whole renewal schedule (it renews
// a third of the TTL after since).
func (d *zkDriver) fresh(since time.Time) bool {
	return time.Since(since) < time.Duration(d.validity.Load())/4
}

// watch sets a watch on node p, returning zk.ErrNoNode when it is gone. It
// uses getData, which sets no watch on a missing node (exists would leave a
// watch for its creation behind, and lock nodes are never created again).
// ZooKeeper delivers no event of a node its watcher may not read, so a node
// we may not read is an error rather than a wait that never ends.
//
// A node named like a lock node that is not ephemeral was made by someone
// else: no session ends it, so waiting behind it would never end.
func (d *zkDriver) watch(p string) (<-chan zk.Event, error) {
	_, st, ch, err := d.conn.GetW(p)
	switch {
	case errors.Is(err, zk.ErrNoAuth):
		return nil, fmt.Errorf("cannot watch %s: every identity locking a key needs READ on the others' nodes: %w", p, denied(err, p, "READ"))
	case err != nil:
		return nil, err
	case st.EphemeralOwner == 0:
		return nil, fmt.Errorf("%w: it is not ephemeral", ErrForeignNode)
	}
	return ch, nil
}

// Inspect implements driver.Inspector: the lock node with the lowest
// sequence under the key's node is the holder's (data: its label; czxid: its
// token; ctime: when it was taken, on the server's clock), the others are
// queued waiters. A holder's node lives as long as its session: Expires is
// zero.
func (d *zkDriver) Inspect(_ context.Context, key string) (driver.Status, error) {
	parent := d.parentOf(key)
	children, _, err := d.conn.Children(parent)
	if errors.Is(err, zk.ErrNoNode) {
		return driver.Status{}, nil
	}
	if err != nil {
		return driver.Status{}, fmt.Errorf("zookeeper: list %s: %w", parent, err)
	}
	first, n := head(children)
	if first == "" {
		return driver.Status{}, nil
	}
	data, stat, err := d.conn.Get(parent + "/" + first)
	if errors.Is(err, zk.ErrNoNode) {
		return driver.Status{Waiters: n - 1}, nil // released meanwhile
	}
	if err != nil {
		return driver.Status{}, fmt.Errorf("zookeeper: read %s/%s: %w", parent, first, err)
	}
	return driver.Status{Held: true, Label: string(data), Token: uint64(stat.Czxid),
		Acquired: time.UnixMilli(stat.Ctime).UTC(), Waiters: n - 1}, nil
}

// head returns the holder's node among a queue's children (the lock node
// with the lowest sequence, "" when there is none) and how many lock nodes
// there are.
func head(children []string) (first string, n int) {
	var firstSeq int64
	for _, c := range children {
		seq, ok := sequenceOf(c)
		if !ok {
			continue
		}
		n++
		if first == "" || seq < firstSeq {
			first, firstSeq = c, seq
		}
	}
	return first, n
}

// Break implements driver.Breaker (locker.ForceUnlock): the holder's node
// (the lowest sequence under the key's node) is deleted; the next waiter's
// watch and the holder's own see it go.
func (d *zkDriver) Break(ctx context.Context, key string) error {
	parent := d.parentOf(key)
	children, err := call(ctx, d, func() ([]string, error) {
		c, _, err := d.conn.Children(parent)
		return c, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return driver.ErrNotHeld
	}
	if err != nil {
		return fmt.Errorf("zookeeper: list %s: %w", parent, classify(err))
	}
	first, _ := head(children)
	if first == "" {
		return driver.ErrNotHeld
	}
	err = call0(ctx, d, func() error { return d.conn.Delete(parent+"/"+first, -1) })
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: %s/%s was released meanwhile", driver.ErrNotHeld, parent, first)
	}
	if err != nil {
		return fmt.Errorf("zookeeper: delete %s/%s: %w", parent, first, classify(err))
	}
	return nil
}

// sequenceOf parses the sequence number ZooKeeper appended to a lock node's
// name.
func sequenceOf(name string) (int64, bool) {
	if !strings.HasPrefix(name, protectedPrefix) {
		return 0, false
	}
	i := strings.LastIndex(name, lockMarker)
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(name[i+len(lockMarker):], 10, 64)
	return n, err == nil
}

// guidOf returns the protection GUID of a lock node's name, or "".
func guidOf(name string) string {
	if !strings.HasPrefix(name, protectedPrefix) || len(name) < len(protectedPrefix)+guidLen {
		return ""
	}
	return name[len(protectedPrefix) : len(protectedPrefix)+guidLen]
}

// predecessor returns the name of the node just before name (whose sequence
// is seq) in the queue children, "" when name is first, and whether name is
// in children at all. Names that are not lock nodes are ignored.
func predecessor(children []string, name string, seq int64) (pred string, found bool) {
	best := int64(-1 << 63)
	for _, c := range children {
		if c == name {
			found = true
			continue
		}
		s, ok := sequenceOf(c)
		if !ok || s >= seq {
			continue
		}
		if pred == "" || s > best {
			pred, best = c, s
		}
	}
	return pred, found
}

// grant records a held lock for renewals and session tracking.
func (d *zkDriver) grant(ctx context.Context, req driver.Request, parent, guid, node string, session, zxid int64, since time.Time) (driver.Grant, error) {
	h := &hold{path: node, session: session, lost: req.Lost}
	d.mu.Lock()
	d.holds[h] = struct{}{}
	d.mu.Unlock()
	// Registered first, checked second: a session change from now on is
	// seen by watchEvents, one before by this check.
	if d.conn.SessionID() != session {
		d.forget(h)
		d.cleanup(ctx, parent, guid, node)
		return driver.Grant{}, fmt.Errorf("session %#x ended while acquiring: %w", session, zk.ErrSessionExpired)
	}
	return driver.Grant{Token: uint64(zxid), Validity: time.Duration(d.validity.Load()), Since: since, State: h}, nil
}

// forget drops h from the holds tracked for renewals and session changes.
func (d *zkDriver) forget(h *hold) {
	h.end()
	d.mu.Lock()
	delete(d.holds, h)
	d.mu.Unlock()
}

// cleanup deletes our node (node, or the one carrying guid under parent when
// node is "") with a fresh bounded context, and leaves it to the janitor when
// that fails.
func (d *zkDriver) cleanup(ctx context.Context, parent, guid, node string) {
	cctx, cancel := d.cleanupContext(ctx)
	defer cancel()
	o := &orphan{parent: parent, guid: guid, path: node}
	if err := d.deleteOrphan(cctx, o); err != nil {
		d.logger.Warn("locker: zookeeper cleanup failed, retrying in the background", "parent", parent, "node", node, "err", err)
		d.addOrphan(o)
	}
}

// deleteOrphan deletes o's node, finding it by its GUID when its path is
// unknown. A node that is already gone is fine.
func (d *zkDriver) deleteOrphan(ctx context.Context, o *orphan) error {
	node := o.path
	if node == "" {
		children, err := call(ctx, d, func() ([]string, error) {
			c, _, err := d.conn.Children(o.parent)
			return c, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", o.parent, err)
		}
		for _, c := range children {
			if guidOf(c) == o.guid {
				node = o.parent + "/" + c
				break
			}
		}
		if node == "" {
			return nil
		}
	}
	err := call0(ctx, d, func() error { return d.conn.Delete(node, -1) })
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	o.path = node
	return fmt.Errorf("delete %s: %w", node, denied(err, o.parent, "DELETE"))
}

func (d *zkDriver) addOrphan(o *orphan) {
	d.mu.Lock()
	d.orphans = append(d.orphans, o)
	d.mu.Unlock()
}

// Renew implements driver.Driver.
func (d *zkDriver) Renew(ctx context.Context, l driver.Lease) (time.Duration, error) {
	v, errs, err := d.RenewBatch(ctx, []driver.Lease{l})
	if err != nil {
		return 0, err
	}
	return v[0], errs[0]
}

// RenewBatch implements driver.BatchRenewer: one multi-operation of version
// checks (per 256 KiB of node names) confirms through the leader that each
// node exists, and so that its session was alive after the call began. A
// check that fails with "no node" makes ZooKeeper skip the rest of its
// multi-operation, which is sent again without it.
func (d *zkDriver) RenewBatch(ctx context.Context, ls []driver.Lease) ([]time.Duration, []error, error) {
	validity := make([]time.Duration, len(ls))
	errs := make([]error, len(ls))
	holds := make([]*hold, len(ls))
	session := d.conn.SessionID()
	var pending []int
	for i, l := range ls {
		h, ok := l.State.(*hold)
		switch {
		case !ok:
			errs[i] = fmt.Errorf("%w: not a zookeeper lease", driver.ErrNotHeld)
		case !h.held():
			errs[i] = driver.ErrNotHeld
		case h.session != session:
			errs[i] = fmt.Errorf("%w: session %#x ended", driver.ErrNotHeld, h.session)
		default:
			holds[i] = h
			pending = append(pending, i)
		}
	}
	for len(pending) > 0 {
		n, size := 0, 0
		for n < len(pending) && (n == 0 || size+len(holds[pending[n]].path)+32 <= multiBudget) {
			size += len(holds[pending[n]].path) + 32
			n++
		}
		chunk := pending[:n]
		ops := make([]any, n)
		for j, i := range chunk {
			ops[j] = &zk.CheckVersionRequest{Path: holds[i].path, Version: -1}
		}
		res, err := call(ctx, d, func() ([]zk.MultiResponse, error) { return d.conn.Multi(ops...) })
		if err != nil && len(res) != n {
			// The whole call failed: the outcome of every renewal left is
			// unknown.
			for _, i := range pending {
				errs[i] = fmt.Errorf("renew: %w", err)
			}
			break
		}
		// Checks before the first failure passed; the failed one says why;
		// ZooKeeper skipped the ones after it.
		failed := n
		if err != nil {
			failed = slices.IndexFunc(res, func(r zk.MultiResponse) bool { return r.Error != nil })
			if failed < 0 {
				failed = 0
				res[0].Error = err
			}
		}
		for _, i := range chunk[:failed] {
			validity[i] = time.Duration(d.validity.Load())
		}
		var again []int
		if failed < n {
			i, e := chunk[failed], res[failed].Error
			if errors.Is(e, zk.ErrNoNode) || errors.Is(e, zk.ErrBadVersion) {
				errs[i] = fmt.Errorf("%w: %s: %w", driver.ErrNotHeld, holds[i].path, e)
			} else {
				errs[i] = fmt.Errorf("renew %s: %w", holds[i].path, e)
			}
			again = chunk[failed+1:]
		}
		pending = slices.Concat(again, pending[n:])
	}
	for i, h := range holds {
		if h != nil && errors.Is(errs[i], driver.ErrNotHeld) {
			d.forget(h)
		}
	}
	return validity, errs, nil
}

// Release implements driver.Driver: it deletes the holder's node (its path
// is unique, so this never touches another owner's node).
// Keep implements driver.Keeper (locker.MinHold): the lock node stays in
// the queue, renewed by nobody, and this Locker deletes it when remaining
// has passed on its monotonic clock; the waiters behind it wake then. If
// the session ends first, ZooKeeper deletes the node with it: after the
// session timeout (at least the TTL, and so the MinHold) when the process
// crashed, but at once when the connection is closed. A Locker's Close
// leaves its kept nodes to the session.
func (d *zkDriver) Keep(_ context.Context, l driver.Lease, remaining time.Duration) error {
	h, ok := l.State.(*hold)
	if !ok {
		return fmt.Errorf("%w: not a zookeeper lease", driver.ErrNotHeld)
	}
	if !h.held() {
		return driver.ErrNotHeld
	}
	d.forget(h)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.keeps == nil {
		d.keeps = make(map[*time.Timer]struct{})
	}
	var t *time.Timer
	t = time.AfterFunc(remaining, func() {
		d.mu.Lock()
		_, live := d.keeps[t]
		delete(d.keeps, t)
		d.mu.Unlock()
		if live {
			// On failure the node goes with the session.
			_ = d.conn.Delete(h.path, -1)
		}
	})
	d.keeps[t] = struct{}{}
	return nil
}

func (d *zkDriver) Release(ctx context.Context, l driver.Lease) error {
	h, ok := l.State.(*hold)
	if !ok {
		return fmt.Errorf("%w: not a zookeeper lease", driver.ErrNotHeld)
	}
	if !h.held() {
		return driver.ErrNotHeld
	}
	// The hold stays held until the node is gone: ending it first would
	// make a renewal round overlapping the Delete report a loss.
	err := call0(ctx, d, func() error { return d.conn.Delete(h.path, -1) })
	switch {
	case err == nil:
		d.forget(h)
		return nil
	case errors.Is(err, zk.ErrNoNode):
		d.forget(h)
		return fmt.Errorf("%w: %s: %w", driver.ErrNotHeld, h.path, err)
	}
	// Unknown outcome: ZooKeeper does not forget the node while the session
	// lives. The hold stays held, and the engine, which retries the release
	// of a lock whose Unlock had an unknown outcome until it succeeds (and a
	// last time on Close), calls Release again.
	return fmt.Errorf("delete %s: %w", h.path, classify(denied(err, path.Dir(h.path), "DELETE")))
}
