package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// zkDriver implements driver.Driver, driver.Acquirer, driver.BatchRenewer,
// driver.Configurer, driver.Sharer, driver.Limiter, driver.MultiAcquirer,
// driver.MultiWaiter and driver.MultiReleaser on one go-zookeeper
// connection.
type zkDriver struct {
	conn   *zk.Conn
	events <-chan zk.Event // nil when the caller gave none
	root   string
	acls   atomic.Pointer[nodeACL] // see currentACL and fallBack

	// Set by Configure, read-only afterwards.
	ttl    time.Duration
	logger *slog.Logger

	// validity is how long a lock is counted on after a request that
	// proved its session alive: the TTL, or the session timeout the server
	// granted when that is shorter (in nanoseconds).
	validity atomic.Int64
	// seen is the session whose granted timeout validity took in, for a
	// driver without events (see noteSession).
	seen atomic.Int64

	ctx    context.Context // cancelled by Close: ends janitor sweeps
	cancel context.CancelFunc
	stop   chan struct{}  // closed by Close
	wg     sync.WaitGroup // the events and janitor goroutines
	calls  tally          // go-zookeeper calls running in workers (see run)
	// work hands a call to an idle worker; workers counts the workers.
	work    chan func()
	workers tally
	// cleanups are the deletions of our nodes that went on after their
	// caller's ctx ended (see cleanup and abandonCreate).
	cleanups tally

	connClosed atomic.Bool // the events channel was closed

	mu      sync.Mutex
	holds   map[*hold]struct{}
	orphans []*orphan
	// keeps are the timers that delete kept lock nodes when their MinHold
	// ends (Keep); Close stops them and leaves the nodes to the session.
	keeps map[*time.Timer]struct{}
	// queued are the shared requests waiting in line, by owner token (see
	// TryAcquireShared).
	queued map[string]waiter
	// free are the key nodes known free of lock nodes at a data version,
	// by path (see freed).
	free map[string]keyVersion
	// following and clearing are the limit records this Locker waits to
	// delete (followRecord) and is deleting (clearRecords), by path.
	following, clearing map[string]struct{}

	hooks hooks
}

// hooks are functions tests set to order a race; nil in production.
type hooks struct {
	beforeLimitWrite func() // in SetLimit, between its listing and its write
	beforeClaim      func() // in a waiter's attempt, before its claim is sent
	afterListing     func() // in a waiter's attempt, once its listing returned
	beforeMulti      func() // in TryAcquireMulti, between its listings and its write
}

func newDriver(conn *zk.Conn, events <-chan zk.Event, root string, acl *nodeACL) *zkDriver {
	ctx, cancel := context.WithCancel(context.Background())
	d := &zkDriver{
		conn:   conn,
		events: events,
		root:   root,
		logger: slog.New(slog.DiscardHandler),
		ctx:    ctx,
		cancel: cancel,
		stop:   make(chan struct{}),
		work:   make(chan func()),
		holds:  make(map[*hold]struct{}),
	}
	d.acls.Store(acl)
	return d
}

// Info implements driver.Driver. The driver promises PromptCancel: each
// go-zookeeper call (a waiter's create and the calls of its wait, all
// together) runs in a worker goroutine that the caller stops waiting for
// when its ctx ends, and the deletion of a node left by a cancelled
// call goes on in the background.
func (d *zkDriver) Info() driver.Info {
	return driver.Info{Name: backendName, MaxKeyBytes: MaxKeyBytes, PromptCancel: true}
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

// parentOf returns the parent node of a store key's lock queue.
func (d *zkDriver) parentOf(key string) string { return QueuePath(d.root, key) }
