package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

// A Locker that owns its client (Open) promises driver.Info.PromptCancel:
// the engine makes every call in its caller's goroutine. go-redis does not
// stop a command when its ctx ends, so the owned client runs a script or
// pipeline whose ctx can end on a connection of its own, and closes that
// connection when the ctx ends. The caller then returns at once with the
// ctx's error. A request that Redis has read still runs after the cut: an
// attempt that may have queued or taken something leaves it to a
// driver.Residue, whose cleanup first writes a tombstone of its owner (see
// cutKey; a shared attempt's is a record of the key's holds hash, see
// buryShared). acquire.lua and shared_acquire.lua do nothing for an owner
// with a tombstone, so a cut request that runs after its cleanup takes
// nothing and leaves nothing. Calls whose ctx never ends use the shared pool, and
// calls whose ctx ends only when the Locker closes a pool that Close cuts
// (closing.go).

// cutSlotIdle is how many idle cut slots an owned client keeps at most,
// beside its pool.
const cutSlotIdle = 16

// ownedClient is the single-node client of a Locker opened by Open: the
// client of the URL, and idle slots for calls whose ctx can end.
type ownedClient struct {
	*goredis.Client
	opt goredis.Options // the client's as given, before go-redis filled them in

	mu     sync.Mutex
	idle   []*cutSlot
	closed bool

	// closing is the pool of the calls whose ctx ends only when the
	// Locker closes (closing.go); nil before Configure.
	closing atomic.Pointer[closingPool]
}

// newOwnedClient makes the client of o, which the Locker owns.
func newOwnedClient(o *goredis.Options) *ownedClient {
	// The slots copy o as given: go-redis fills in a client's options
	// with objects of its own (a push notification processor) that
	// another client must not share.
	c := &ownedClient{opt: *o}
	c.Client = goredis.NewClient(o)
	return c
}

// cutSlot is a client of one connection, which cut closes.
type cutSlot struct {
	client *goredis.Client
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)

	mu      sync.Mutex
	conn    net.Conn // the connection, nil before a dial
	armed   bool     // a call runs: its ctx's end cuts the connection
	cut     bool     // the call in progress was cut: no more dials
	refused bool     // a dial was refused: the slot is not reused

	// stop stops the cut of the call in progress (context.AfterFunc's);
	// only that call's goroutine uses it.
	stop func() bool
	// cutFn is cutNow, bound once: a method value per call would allocate.
	cutFn func()
	// cutting, when set (by tests), runs as a cut starts, before it
	// looks at the slot.
	cutting func()
}

// errCut is the error of a connection dialled on a slot whose call was
// cut.
var errCut = errors.New("the call's connection was cut when its ctx ended")

// newSlot makes a slot with c's options: one connection, dialled by c's
// dialer through the slot.
func (c *ownedClient) newSlot() *cutSlot {
	o := c.opt
	s := &cutSlot{dial: o.Dialer}
	if s.dial == nil {
		s.dial = goredis.NewDialer(&o)
	}
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 1, 0, 1, 1
	// No pool of its own for pipelines: their connection would not be the
	// one a cut closes.
	o.PipelinePoolSize = -1
	// A failed dial is not tried again: the call has its ctx.
	o.DialerRetries = 1
	o.Dialer = s.dialConn
	s.client = goredis.NewClient(&o)
	s.cutFn = s.cutNow
	return s
}

// dialConn dials the slot's connection. Once the slot's call was cut, it
// dials nothing and returns a connection whose every read and write fails
// with errCut: go-redis logs a failed dial to stderr, and a library must
// not write there.
func (s *cutSlot) dialConn(ctx context.Context, network, addr string) (net.Conn, error) {
	if s.refuse() {
		return cutConn{}, nil
	}
	conn, err := s.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		s.refused = true
		_ = conn.Close()
		return cutConn{}, nil
	}
	s.conn = conn
	return conn, nil
}

// refuse reports whether the slot's call was cut, and then marks the slot
// refused.
func (s *cutSlot) refuse() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		s.refused = true
	}
	return s.cut
}

// cutConn is the connection a slot dials once its call was cut: it fails
// every read and write with errCut.
type cutConn struct{}

func (cutConn) Read([]byte) (int, error) { return 0, &net.OpError{Op: "read", Net: "tcp", Err: errCut} }
func (cutConn) Write([]byte) (int, error) {
	return 0, &net.OpError{Op: "write", Net: "tcp", Err: errCut}
}
func (cutConn) Close() error                     { return nil }
func (cutConn) LocalAddr() net.Addr              { return cutAddr{} }
func (cutConn) RemoteAddr() net.Addr             { return cutAddr{} }
func (cutConn) SetDeadline(time.Time) error      { return nil }
func (cutConn) SetReadDeadline(time.Time) error  { return nil }
func (cutConn) SetWriteDeadline(time.Time) error { return nil }

// cutAddr is the address of a cutConn.
type cutAddr struct{}

func (cutAddr) Network() string { return "tcp" }
func (cutAddr) String() string  { return "cut" }

// cutNow closes the slot's connection, and refuses dials from then on,
// unless the call it was armed for has ended.
func (s *cutSlot) cutNow() {
	if s.cutting != nil {
		s.cutting()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.armed {
		return // too late: the call ended, and the slot serves another
	}
	s.cut = true
	if s.conn != nil {
		_ = s.conn.Close()
	}
}

// reusable disarms the slot, and reports whether it may serve another
// call after one that ended with err: go-redis dropped a connection cut
// under a call that failed, but keeps one cut after its reply, and a slot
// that refused a dial is spent. A cut that starts after this finds the
// slot disarmed, and does nothing.
func (s *cutSlot) reusable(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = false
	if s.refused || s.cut && err == nil {
		return false
	}
	s.cut = false
	return true
}

// take returns a slot for a call with ctx, armed to be cut when ctx ends;
// the caller gives it back with release and the call's error.
func (c *ownedClient) take(ctx context.Context) *cutSlot {
	var s *cutSlot
	c.mu.Lock()
	if n := len(c.idle); n > 0 {
		s = c.idle[n-1]
		c.idle = c.idle[:n-1]
	}
	c.mu.Unlock()
	if s == nil {
		s = c.newSlot()
	}
	s.mu.Lock()
	s.armed = true
	s.mu.Unlock()
	s.stop = context.AfterFunc(ctx, s.cutFn)
	return s
}

// release gives back slot s, taken by take, after a call that ended with
// err: to the idle slots, or closed.
func (c *ownedClient) release(s *cutSlot, err error) {
	// stop is false once the cut has started. A started cut may not have
	// looked at the slot yet, and would cut the next call it serves: such
	// a slot is not reused.
	started := !s.stop()
	s.stop = nil
	if !s.reusable(err) || started {
		_ = s.client.Close()
		return
	}
	c.mu.Lock()
	keep := !c.closed && len(c.idle) < cutSlotIdle
	if keep {
		c.idle = append(c.idle, s)
	}
	c.mu.Unlock()
	if !keep {
		_ = s.client.Close()
	}
}

// ended returns why ctx ended: its Err, or context.DeadlineExceeded once
// its deadline passed (a read that timed out at the deadline may return
// before ctx.Err is set); nil while it runs.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// cuttable reports whether a call with ctx goes to a slot: ctx can end,
// and is not marked by uncut.
func cuttable(ctx context.Context) bool { return ctx.Done() != nil && ctx.Value(uncutKey{}) == nil }

// uncutKey marks a ctx whose calls use the client's pool (uncut).
type uncutKey struct{}

// uncut returns ctx, marked so that its calls use the client's pool: the
// engine's renewals and cleanups, bounded by their deadlines
// (ContextTimeoutEnabled), whose callers need not return at once.
func uncut(ctx context.Context) context.Context { return context.WithValue(ctx, uncutKey{}, true) }

// residue returns cause wrapped in a driver.Residue whose Cleanup runs out
// on the client's pool.
func residue(cause error, out func(ctx context.Context) error) *driver.Residue {
	return &driver.Residue{Err: cause, Cleanup: func(ctx context.Context) error { return out(uncut(ctx)) }}
}

// onSlot returns do's command, run on the pool of ctx, or on a slot when
// ctx can end otherwise.
func (c *ownedClient) onSlot(ctx context.Context, do func(cl *goredis.Client) *goredis.Cmd) *goredis.Cmd {
	if cl := c.pool(ctx); cl != nil {
		return do(cl)
	}
	s := c.take(ctx)
	cmd := do(s.client)
	c.release(s, cmd.Err())
	return cmd
}

// Process runs cmd, on a slot when ctx can end: runScript's commands.
func (c *ownedClient) Process(ctx context.Context, cmd goredis.Cmder) error {
	if cl := c.pool(ctx); cl != nil {
		return cl.Process(ctx, cmd)
	}
	s := c.take(ctx)
	err := s.client.Process(ctx, cmd)
	c.release(s, cmd.Err())
	return err
}

// Eval runs EVAL, on a slot when ctx can end.
func (c *ownedClient) Eval(ctx context.Context, script string, keys []string, args ...any) *goredis.Cmd {
	return c.onSlot(ctx, func(cl *goredis.Client) *goredis.Cmd { return cl.Eval(ctx, script, keys, args...) })
}

// EvalSha runs EVALSHA, on a slot when ctx can end.
func (c *ownedClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd {
	return c.onSlot(ctx, func(cl *goredis.Client) *goredis.Cmd { return cl.EvalSha(ctx, sha1, keys, args...) })
}

// EvalRO runs EVAL_RO, on a slot when ctx can end.
func (c *ownedClient) EvalRO(ctx context.Context, script string, keys []string, args ...any) *goredis.Cmd {
	return c.onSlot(ctx, func(cl *goredis.Client) *goredis.Cmd { return cl.EvalRO(ctx, script, keys, args...) })
}

// EvalShaRO runs EVALSHA_RO, on a slot when ctx can end.
func (c *ownedClient) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd {
	return c.onSlot(ctx, func(cl *goredis.Client) *goredis.Cmd { return cl.EvalShaRO(ctx, sha1, keys, args...) })
}

// BLPop runs BLPOP, on a slot when ctx can end.
func (c *ownedClient) BLPop(ctx context.Context, timeout time.Duration, keys ...string) *goredis.StringSliceCmd {
	if cl := c.pool(ctx); cl != nil {
		return cl.BLPop(ctx, timeout, keys...)
	}
	s := c.take(ctx)
	cmd := s.client.BLPop(ctx, timeout, keys...)
	c.release(s, cmd.Err())
	return cmd
}

// Pipeline returns a pipeline whose Exec runs on a slot when its ctx can
// end.
func (c *ownedClient) Pipeline() goredis.Pipeliner {
	return &cutPipeline{Pipeliner: c.Client.Pipeline(), c: c}
}

// Close closes the idle slots, the closing pool and the client.
func (c *ownedClient) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	for _, s := range idle {
		_ = s.client.Close()
	}
	c.closeClosing()
	return c.Client.Close()
}

// cutPipeline is a pipeline of an ownedClient.
type cutPipeline struct {
	goredis.Pipeliner
	c *ownedClient
}

// Exec sends the queued commands, on the pool of ctx, or on a slot when
// ctx can end otherwise.
func (p *cutPipeline) Exec(ctx context.Context) ([]goredis.Cmder, error) {
	cl := p.c.pool(ctx)
	if cl == p.c.Client {
		return p.Pipeliner.Exec(ctx)
	}
	cmds := slices.Clone(p.Pipeliner.Cmds())
	p.Pipeliner.Discard()
	if cl != nil {
		return execOn(ctx, cl, cmds)
	}
	s := p.c.take(ctx)
	res, err := execOn(ctx, s.client, cmds)
	p.c.release(s, err)
	return res, err
}

// execOn sends cmds in one pipeline of cl.
func execOn(ctx context.Context, cl *goredis.Client, cmds []goredis.Cmder) ([]goredis.Cmder, error) {
	sp := cl.Pipeline()
	for _, cmd := range cmds {
		_ = sp.Process(ctx, cmd)
	}
	return sp.Exec(ctx)
}

// kindCut is the kind of the tombstones of cutKey.
const kindCut = "cut"

// cutKey returns the tombstone of owner's lock attempts on store key s, in
// the key's slot: while it exists, acquire.lua and multi_acquire.lua do
// nothing for owner.
func cutKey(s, owner string) string {
	var b strings.Builder
	b.Grow(nameLen(kindCut, s) + 1 + len(owner))
	writeName(&b, kindCut, s)
	b.WriteByte(':')
	b.WriteString(owner)
	return b.String()
}

// cutsCalls reports whether the calls of d whose ctx can end run on a slot
// that is cut when the ctx ends.
func (d *redisDriver) cutsCalls() bool {
	_, ok := d.client.(*ownedClient)
	return ok
}

// cuts reports whether d's calls with ctx run on a slot cut when ctx ends.
func (d *redisDriver) cuts(ctx context.Context) bool { return d.cutsCalls() && cuttable(ctx) }

// withTomb returns the keys of an attempt of req with ctx, and the same
// keys boxed for runScript (boxed; nil stays nil), with the tombstone its
// script honours appended when the attempt may be cut, and that tombstone
// ("" when it cannot be cut).
func (d *redisDriver) withTomb(ctx context.Context, req driver.Request, keys []string, boxed []any) ([]string, []any, string) {
	if !d.cuts(ctx) {
		return keys, boxed, ""
	}
	tomb := cutKey(req.Key, req.Owner)
	if boxed != nil {
		boxed = append(boxed[:len(boxed):len(boxed)], tomb)
	}
	return append(keys[:len(keys):len(keys)], tomb), boxed, tomb
}

// withTombOf is withTomb for the keys of n, in fewer allocations: an
// attempt whose ctx ends only when the Locker closes takes n's closing
// keys, made once.
func (d *redisDriver) withTombOf(ctx context.Context, req driver.Request, n *keyNames) ([]string, []any, string) {
	if c := n.closing; c != nil && ctx.Done() == d.closing {
		return c.keys[:], c.args, c.tomb
	}
	if !d.cuts(ctx) {
		return n.keys[:], n.keyArgs, ""
	}
	t := n.withTomb(cutKey(req.Key, req.Owner))
	return t.keys[:], t.args, t.tomb
}

// buryCut returns the error of an attempt of req that failed with err
// because its call was cut (tomb is set and ctx ended): a driver.Residue
// whose cleanup writes tomb and then runs out (see bury). It returns nil
// for any other outcome.
func (d *redisDriver) buryCut(ctx context.Context, req driver.Request, err error, tomb string, out func(ctx context.Context, key, owner string) error) error {
	cause := cutCause(ctx, err, tomb)
	if cause == nil {
		return nil
	}
	// Redis may still run the request, after the cleanup.
	key, owner, ttl := req.Key, req.Owner, tombLife(req)
	return d.bury(req, fmt.Errorf("acquire: %w", cause), func(ctx context.Context) error {
		pipe := d.client.Pipeline()
		set := pipe.Set(ctx, tomb, "1", ttl)
		_, _ = pipe.Exec(ctx)
		if err := set.Err(); err != nil {
			return fmt.Errorf("tombstone: %w", classify(err))
		}
		return out(ctx, key, owner)
	})
}

// cutCause returns why an attempt with ctx that failed with err was cut,
// ctx's end, when the attempt has a tombstone tomb; nil when it was not
// cut.
func cutCause(ctx context.Context, err error, tomb string) error {
	if err == nil || tomb == "" {
		return nil
	}
	return ended(ctx)
}

// tombID returns the id of the tombstone that a shared attempt of req
// with ctx honours (see shared_lib.lua): the Locker's id for an attempt
// whose ctx ends only when the Locker closes (it makes none after), the
// owner for another that may be cut, "" for one that cannot be cut.
func (d *redisDriver) tombID(ctx context.Context, req driver.Request) string {
	switch {
	case d.closing != nil && ctx.Done() == d.closing:
		return d.lid
	case d.cuts(ctx):
		return req.Owner
	}
	return ""
}

// tombLife is how long the tombstone of an attempt of req lives.
func tombLife(req driver.Request) time.Duration { return max(req.TTL, time.Second) }

// cleanUpCut is cleanUp for a driver that cuts its calls: out runs with
// ctx, so that the caller returns when ctx ends, and the engine runs it
// again when it failed.
func (d *redisDriver) cleanUpCut(ctx context.Context, cause error, out func(ctx context.Context) error) error {
	if ended(ctx) == nil {
		if err := out(ctx); err == nil || errors.Is(err, driver.ErrNotHeld) {
			return cause
		}
	}
	return residue(cause, out)
}

// bury returns cause, wrapped in a driver.Residue whose cleanup is cleanup:
// it writes a tombstone for req's TTL (tombLife) and then undoes what the
// attempt may have done; the attempt was cut when its ctx ended, and Redis
// may run its request later. The cleanup is left to the engine, so that
// the caller returns at once.
//
// Redis runs such a request about when it was cut, if at all. What it can
// leave (a lock, a place in line, a hand-over claimed for it) lapses by
// itself a TTL or a stale time after that, plus a claim. A closing Locker
// tries the cleanup only until then (driver.Residue.Gone): a request run
// later still would cost liveness, never exclusion.
func (d *redisDriver) bury(req driver.Request, cause error, cleanup func(ctx context.Context) error) error {
	r := residue(cause, cleanup)
	r.Gone = time.Now().Add(max(req.TTL, staleAfter(req.TTL)) + claimWindow)
	return r
}
