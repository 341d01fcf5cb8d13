package redis

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

const (
	// inboxTTL is how long an inbox list outlives its last grant (inbox_ms
	// in lib.lua).
	inboxTTL = time.Minute
	// inboxIdle is how long the reader blocks before it looks whether any
	// waiter is left; with none, it stops until the next one registers.
	inboxIdle = 2 * time.Second
	// inboxReadMargin is how long past its timeout the reader waits for
	// a BLPOP's reply: a client with ContextTimeoutEnabled gives up then,
	// where go-redis would wait 10 s more on a store that does not answer.
	inboxReadMargin = time.Second
	// closeMarker is the entry close pushes to wake the reader's BLPOP: it
	// names nobody, and parseInboxGrant refuses it.
	closeMarker = "close"
)

// blpopper is the part of a go-redis client the inbox reader needs.
type blpopper interface {
	BLPop(ctx context.Context, timeout time.Duration, keys ...string) *goredis.StringSliceCmd
}

// inboxName returns the name of the inbox list of the Locker with id lid.
func inboxName(lid string) string { return namespace + "inbox:" + lid }

// inboxGrant is a hand-over read from the inbox: "<owner> <seq> <token>
// <claim>".
type inboxGrant struct {
	seq   uint64        // the waiter's attempt the hand-over read from its record
	token uint64        // the fencing token
	claim time.Duration // the lock's time to live from the hand-over
}

// parseInboxGrant parses an inbox entry.
func parseInboxGrant(entry string) (string, inboxGrant, bool) {
	f := strings.Fields(entry)
	if len(f) != 4 {
		return "", inboxGrant{}, false
	}
	seq, err1 := strconv.ParseUint(f[1], 10, 64)
	token, err2 := strconv.ParseUint(f[2], 10, 64)
	claim, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || seq == 0 || token == 0 || claim <= 0 {
		return "", inboxGrant{}, false
	}
	return f[0], inboxGrant{seq: seq, token: token, claim: time.Duration(claim) * time.Millisecond}, true
}

// inbox reads the grants that release scripts push into this Locker's
// inbox list, and hands each to the waiting Lock of the owner it names. The
// list is data of the store, written by scripts: a grant read from it is as
// trustworthy as the lock key itself, unlike a pub/sub message. An entry
// that names no waiting Lock (it gave up, or the Locker is another's) is
// dropped: the waiter's owner is unique to its acquisition. One for a wait
// that gave up and whose cleanup the engine has yet to run (see passOn)
// runs that cleanup, which passes the key on.
//
// One goroutine, started by the first registration, blocks in BLPOP on one
// connection of the client's pool; it stops when no waiter is left after
// inboxIdle, and on close.
type inbox struct {
	client blpopper
	pipe   func() goredis.Pipeliner
	key    string
	logger *slog.Logger
	idle   time.Duration // the BLPOP's timeout: inboxIdle

	mu      sync.Mutex
	waiters map[string]chan inboxGrant // by owner
	// spare are channels of waiters that unregistered, emptied, for the
	// next ones: a Lock that takes a free key at once allocates none.
	spare []chan inboxGrant
	// left holds, by owner, the cleanups of waits that gave up while
	// their Locker's calls are cut: the engine runs them in the
	// background, and a grant read for such an owner runs it at once.
	left    map[string]*passOn
	running bool
	failed  bool // the last BLPOP failed: waiters do not ask for grants here
	// disabled is set for good when the server refused BLPOP.
	disabled bool
	closed   bool
	done     chan struct{} // closed when the running reader exits
	stop     chan struct{} // closed by close
	// readCtx is the ctx of the reader's BLPOP, which close cancels: on
	// a client that cuts its calls (Open's), that ends the BLPOP at once.
	readCtx    context.Context
	cancelRead context.CancelFunc
	cuts       bool // the client cuts a call when its ctx ends
}

func newInbox(client Client, lid string, logger *slog.Logger) *inbox {
	b, ok := client.(blpopper)
	if !ok {
		return nil
	}
	switch client.(type) {
	case *goredis.ClusterClient, *goredis.Ring:
		// A script may not write a key outside its slot.
		return nil
	}
	_, cuts := client.(*ownedClient)
	ib := &inbox{client: b, pipe: client.Pipeline, key: inboxName(lid), logger: logger,
		waiters: make(map[string]chan inboxGrant), left: make(map[string]*passOn), stop: make(chan struct{}), cuts: cuts, idle: inboxIdle}
	ib.readCtx, ib.cancelRead = context.WithCancel(context.Background())
	return ib
}

// register registers the waiting Lock of owner and starts the reader if it
// is not running. Its channel receives the grants read for owner; it is nil
// after close, or once the server refused BLPOP, and otherwise unregister
// must follow. It does not block on the network.
func (ib *inbox) register(owner string) (grants <-chan inboxGrant) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if ib.closed || ib.disabled {
		return nil
	}
	var ch chan inboxGrant
	if n := len(ib.spare); n > 0 {
		ch = ib.spare[n-1]
		ib.spare[n-1] = nil
		ib.spare = ib.spare[:n-1]
	} else {
		ch = make(chan inboxGrant, 1)
	}
	ib.waiters[owner] = ch
	if !ib.running {
		ib.running = true
		ib.done = make(chan struct{})
		go ib.read(ib.done)
	}
	return ch
}

// maxSpareGrants is how many channels of waiters that unregistered an
// inbox keeps for the next ones.
const maxSpareGrants = 8

// unregister ends the registration of owner's waiting Lock, which reads its
// channel no more.
func (ib *inbox) unregister(owner string) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ch := ib.waiters[owner]
	delete(ib.waiters, owner)
	if ch == nil || len(ib.spare) >= maxSpareGrants {
		return
	}
	// Only the reader and wakeLocked send, under ib.mu, and only to
	// registered waiters: a grant left in ch is owner's, and nobody's now.
	select {
	case <-ch:
	default:
	}
	ib.spare = append(ib.spare, ch)
}

// passOn is the cleanup of a wait that gave up while its Locker's calls
// are cut (see leave): out of the queue, and the key passed on if it was
// handed over meanwhile. The engine runs it in the background, and may be
// slow to (its cleanups back off after a failed round). A hand-over to the
// waiter that comes before that claims the key until then: the inbox
// reader runs the cleanup as soon as it reads that grant. It runs once:
// whoever comes second finds it done, and never sends a second release
// beside the first.
type passOn struct {
	mu   sync.Mutex
	done bool
	out  func(ctx context.Context) error
	ib   *inbox
	who  string // the owner
}

// run runs the cleanup unless it is done; the engine calls it (a
// driver.Residue's Cleanup).
func (p *passOn) run(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runLocked(ctx)
}

// runLocked is run with p.mu held.
func (p *passOn) runLocked(ctx context.Context) error {
	if p.done {
		return nil
	}
	if err := p.out(ctx); err != nil {
		return err
	}
	p.done = true
	p.ib.forget(p.who, p)
	return nil
}

// leave registers the cleanup out of owner's wait, which gave up, in place
// of its registration, and returns its run for the engine.
func (ib *inbox) leave(owner string, out func(ctx context.Context) error) func(ctx context.Context) error {
	p := &passOn{out: out, ib: ib, who: owner}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	delete(ib.waiters, owner)
	if !ib.closed {
		ib.left[owner] = p
	}
	return p.run
}

// forget drops p, the cleanup of owner's wait, once done.
func (ib *inbox) forget(owner string, p *passOn) {
	ib.mu.Lock()
	if ib.left[owner] == p {
		delete(ib.left, owner)
	}
	ib.mu.Unlock()
}

// passOn runs p after the reader read a grant for its owner, unless the
// engine runs it now: its release then passes the grant on. A failure is
// the engine's to retry.
func (ib *inbox) passOn(p *passOn) {
	if !p.mu.TryLock() {
		return // the engine's run is under way
	}
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(uncut(ib.readCtx), cleanupTimeout)
	defer cancel()
	if err := p.runLocked(ctx); err != nil {
		ib.logger.Debug("locker: redis: passing on a grant for a wait that gave up failed; the background cleanup retries", "err", err)
	}
}

// setLogger sets the logger before first use; a nil inbox ignores it.
func (ib *inbox) setLogger(l *slog.Logger) {
	if ib != nil {
		ib.logger = l
	}
}

// usable reports whether a waiting Lock may ask for its grants in the inbox.
func (ib *inbox) usable() bool {
	if ib == nil {
		return false
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	return ib.running && !ib.failed && !ib.closed && !ib.disabled
}

// isDisabled reports whether the server refused BLPOP.
func (ib *inbox) isDisabled() bool {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	return ib.disabled
}

// read is the reader goroutine.
func (ib *inbox) read(done chan struct{}) {
	defer close(done)
	failures := 0
	var gaveUp *passOn // the cleanup of a wait that gave up, whose grant came
	for {
		select {
		case <-ib.stop:
			ib.mu.Lock()
			ib.running = false
			ib.mu.Unlock()
			return
		default:
		}
		rctx, cancel := context.WithTimeout(ib.readCtx, ib.idle+inboxReadMargin)
		res, err := ib.client.BLPop(rctx, ib.idle, ib.key).Result()
		cancel()
		ib.mu.Lock()
		if ib.closed {
			ib.running = false
			ib.mu.Unlock()
			return
		}
		switch {
		case errors.Is(err, goredis.Nil):
			ib.failed = false
			if len(ib.waiters) == 0 {
				ib.running = false
				ib.mu.Unlock()
				return
			}
		case refused(err):
			// The server refuses BLPOP, or the list (ACL): hand-overs
			// are confirmed by an attempt from now on.
			ib.disabled, ib.running = true, false
			ib.wakeLocked()
			ib.mu.Unlock()
			ib.logger.Info("locker: redis: the server refuses reading the inbox; hand-overs are confirmed by an attempt from now on", "cause", err)
			return
		case err != nil:
			if !ib.failed {
				ib.wakeLocked()
			}
			ib.failed = true
			failures++
			if len(ib.waiters) == 0 {
				ib.running = false
				ib.mu.Unlock()
				return
			}
		default:
			ib.failed = false
			failures = 0
			if len(res) == 2 {
				if owner, g, ok := parseInboxGrant(res[1]); ok {
					if ch := ib.waiters[owner]; ch != nil {
						select {
						case ch <- g:
						default:
						}
					} else if p := ib.left[owner]; p != nil {
						gaveUp = p
					}
				}
			}
		}
		ib.mu.Unlock()
		if gaveUp != nil {
			ib.passOn(gaveUp)
			gaveUp = nil
		}
		if err != nil && !errors.Is(err, goredis.Nil) {
			if failures == 1 {
				ib.logger.Debug("locker: redis: inbox read failed", "err", err)
			}
			t := time.NewTimer(backoff(failures))
			select {
			case <-t.C:
			case <-ib.stop:
				t.Stop()
			}
		}
	}
}

// wakeLocked hands every waiter a grant that names no attempt, after which
// it confirms in the store, with an attempt that no longer asks for the
// inbox: a grant pushed while nobody read it is not missed. ib.mu must be
// held.
func (ib *inbox) wakeLocked() {
	for _, ch := range ib.waiters {
		select {
		case ch <- inboxGrant{}:
		default:
		}
	}
}

// close stops the reader: it cancels the BLPOP's ctx, which cuts it on a
// client that cuts its calls; on another client, it pushes an entry that
// names nobody, which ends the BLPOP. It waits for the reader until ctx
// ends. When the store does not answer, the BLPOP of a client that does
// not cut blocks until its ctx's deadline (inboxReadMargin after its
// timeout) with ContextTimeoutEnabled, else for its timeout plus 10 s
// (go-redis); the reader then ends by itself (ib.closed is set).
func (ib *inbox) close(ctx context.Context) {
	if ib == nil {
		return
	}
	ib.mu.Lock()
	if ib.closed {
		ib.mu.Unlock()
		return
	}
	ib.closed = true
	clear(ib.left) // the engine still runs them
	close(ib.stop)
	ib.cancelRead()
	running, done := ib.running, ib.done
	ib.mu.Unlock()
	if !running {
		return
	}
	if ib.cuts {
		select {
		case <-done:
		case <-ctx.Done():
		}
		return
	}
	// The marker only helps while the store answers at once.
	pctx, cancel := context.WithTimeout(ctx, inboxReadMargin)
	pipe := ib.pipe()
	pipe.LPush(pctx, ib.key, closeMarker)
	pipe.PExpire(pctx, ib.key, inboxTTL)
	_, _ = pipe.Exec(pctx)
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
