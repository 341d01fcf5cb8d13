package redis

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

// Shared holds (semaphore permits, read and write holds) keep all of one
// key's state under the key's hash tag, beside the plain lock's names (see
// keys.go), so that a Cluster keeps it in one slot:
//
//	holds    locker:{s}:sh  hash owner -> its hold with its expiry, its
//	                        mode and a semaphore's limit; " kind", " limit"
//	                        and " q" besides once the key had waiters or
//	                        a new limit; " cut", the tombstones of attempts
//	                        that were cut (buryShared)
//	queue    locker:{s}:sq  sorted set of waiting owners, by arrival
//	waiters  locker:{s}:sw  hash owner -> "<deadline> <mode> <weight> <lid>"
//
// Tokens come from the plain lock's fence key, so that they increase across
// plain locks and shared holds of the key. shared_lib.lua has the details.
//
// Versions before this layout kept a sorted set of holders under the holds
// hash's name, and their records in a second hash (kindShareOldMeta). Each
// version's scripts fail on the other's holders with WRONGTYPE; this one
// names the problem (errOldLayout).
const (
	kindShareHolds   = "sh"
	kindShareQueue   = "sq"
	kindShareWaiters = "sw"
	// kindShareOldMeta names the holder records of older versions: only
	// ACLRules and Keys still name it.
	kindShareOldMeta = "sm"
)

// errOldLayout is the cause of ErrConflict for a key whose shared holds an
// older version of this package wrote.
var errOldLayout = errors.New("the key's shared holds are in the layout of an older version of this package (a sorted set of holders); upgrade every Locker of the key, or wait until those holds end")

var (
	//go:embed shared_lib.lua
	shareLibLua string
	//go:embed shared_acquire.lua
	shareAcquireLua string
	//go:embed shared_release.lua
	shareReleaseLua string
	//go:embed shared_renew.lua
	shareRenewLua string
	//go:embed sharekind.lua
	shareKindLua string
)

// includeShared inserts shared_lib.lua where a script says
// "-- #include shared_lib.lua", and token.lua and sharekind.lua where
// shared_lib.lua says so.
func includeShared(script string) string {
	return includeKind(includeToken(strings.Replace(script, "-- #include shared_lib.lua\n", shareLibLua, 1)))
}

// sharedKeys returns KEYS of shared_acquire.lua and shared_release.lua for
// store key s: lock, fence, holds, queue, waiters.
func sharedKeys(s string) []string { return newShareState(s).keys[:] }

// shareState is the Lease.State of a shared hold: RenewBatch, Release and
// Keep tell it from a plain lock's by its type. It keeps the names of the
// hold's store key (sharedKeys), made once per store key while it is in
// the Locker's names cache (see namesCache), as lockNames does for a plain
// lock. Nothing changes a shareState once it is made: holds of one key may
// share it.
type shareState struct{ keyNames }

// newShareState makes the names of store key s, in one allocation beside
// the state itself.
func newShareState(s string) *shareState {
	st := &shareState{}
	st.name(s, kindLock, kindFence, kindShareHolds, kindShareQueue, kindShareWaiters, kindChannel)
	return st
}

// shareState returns the names of store key s, with its keys boxed when
// runScript can use them: from the cache when s is there.
func (d *redisDriver) shareState(s string) *shareState {
	return d.shares.get(d, s, boxedShareState)
}

// boxedShareState returns newShareState(s) with its keys boxed for d.
func boxedShareState(d *redisDriver, s string) *shareState {
	st := newShareState(s)
	// No closing keys: a shared attempt names no tombstone (see
	// TryAcquireShared).
	st.keyArgs = d.boxKeys(st.boxes[:], st.keys[:])
	return st
}

// shareChannelArg is the channel argument of shared_acquire.lua for st:
// its channel, or "" (publish nothing) without pub/sub.
func (d *redisDriver) shareChannelArg(st *shareState) any {
	if d.poll.Load() {
		return ""
	}
	return st.channelArg
}

// modeArg is the mode argument of shared_acquire.lua, boxed without an
// allocation.
func modeArg(m driver.Mode) any {
	switch m {
	case driver.Permits:
		return "permits"
	case driver.Read:
		return "read"
	case driver.Write:
		return "write"
	}
	return m.String()
}

// opArg is the op argument of shared_release.lua, boxed without an
// allocation.
func opArg(op string) any {
	switch op {
	case "release":
		return "release"
	case "leave":
		return "leave"
	case "keep":
		return "keep"
	case "limit":
		return "limit"
	case "break":
		return "break"
	case "bury":
		return "bury"
	}
	return op
}

// shareKindOf names the use of a key from a script's kind and limit.
func shareKindOf(kind, limit any) string {
	switch kind {
	case "permits":
		return fmt.Sprintf("a semaphore of %v permits", limit)
	case "layout":
		return "held by shared holds in the layout of an older version of this package"
	}
	return "a read-write lock"
}

// wantedKind names the use of a key that s asks for.
func wantedKind(s driver.Share) string {
	if s.Mode == driver.Permits {
		return fmt.Sprintf("a semaphore of %d permits", s.Limit)
	}
	return "a read-write lock"
}

// TryAcquireShared implements driver.Sharer: one round trip of
// shared_acquire.lua. It drops the expired holders and waiters, checks the
// key's kind and limit, and grants when the hold fits and nobody is ahead
// in line. Refused with s.Queue, it records the caller in line and returns
// a driver.Residue whose Cleanup withdraws it.
func (d *redisDriver) TryAcquireShared(ctx context.Context, req driver.Request, s driver.Share) (driver.Grant, error) {
	if err := checkOwner(req.Owner); err != nil {
		return driver.Grant{}, err
	}
	st := d.shareState(req.Key)
	ttlArg, ttl := d.ttlArgs(req.TTL)
	var queue any = "0"
	if s.Queue {
		queue = "1"
	}
	// The script honours the tombstones of req.Owner and of the Locker
	// (d.lidArg) in the holds hash it reads anyway: an attempt that may be
	// cut sends what one that cannot sends.
	v, err := d.runReplicatedKeys(ctx, d.shareAcquire, sharedTook, st.keys[:], st.keyArgs, req.Owner, ttlArg, d.labelArgOf(req.Label), d.retentionArg,
		modeArg(s.Mode), s.Limit, s.Weight, queue, d.lidArg, d.shareChannelArg(st))
	if token, ok := v.(int64); ok && token > 0 && err == nil {
		return driver.Grant{Token: uint64(token), Validity: time.Duration(ttl) * time.Millisecond, State: st}, nil
	}
	tomb := d.tombID(ctx, req)
	if cause := cutCause(ctx, err, tomb); cause != nil {
		// Redis may still run the request, after the cleanup.
		return driver.Grant{}, d.buryShared(req, fmt.Errorf("acquire: %w", cause), st, tomb)
	}
	if errors.Is(err, errNotReplicated) {
		return driver.Grant{}, d.cleanUp(ctx, req, fmt.Errorf("acquire: %w", err), d.withdraw)
	}
	if err != nil {
		err = fmt.Errorf("acquire: %w", classify(err))
		if s.Queue || maybeExecuted(err) {
			return driver.Grant{}, d.cleanUp(ctx, req, err, d.withdraw)
		}
		return driver.Grant{}, err
	}
	reply, _ := v.([]any)
	if len(reply) == 0 {
		return driver.Grant{}, fmt.Errorf("acquire: unexpected reply %v", v)
	}
	status, _ := reply[0].(string)
	switch {
	case status == "plain":
		return driver.Grant{}, fmt.Errorf("acquire: %w: the key is a plain lock, not %s", driver.ErrConflict, wantedKind(s))
	case status == "layout":
		return driver.Grant{}, fmt.Errorf("acquire: %w: %w", driver.ErrConflict, errOldLayout)
	case status == "conflict" && len(reply) == 3:
		return driver.Grant{}, fmt.Errorf("acquire: %w: the key is %s, not %s", driver.ErrConflict, shareKindOf(reply[1], reply[2]), wantedKind(s))
	case len(reply) != 3:
		return driver.Grant{}, fmt.Errorf("acquire: unexpected reply %v", reply)
	}
	if reply[2] == int64(1) {
		d.noPubSub(errPublishRefused)
	}
	switch status {
	case "ok":
		v, _ := reply[1].(string)
		token, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return driver.Grant{}, fmt.Errorf("acquire: malformed token %q", v)
		}
		return driver.Grant{Token: token, Validity: time.Duration(ttl) * time.Millisecond, State: st}, nil
	case "held":
		ms, _ := reply[1].(int64)
		remaining := time.Duration(ms) * time.Millisecond
		if !s.Queue {
			return driver.Grant{}, driver.Held(remaining)
		}
		// Back before the record expires.
		if r := req.TTL / 3; remaining <= 0 || remaining > r {
			remaining = r
		}
		key, owner := req.Key, req.Owner
		return driver.Grant{}, residue(driver.Held(remaining), func(ctx context.Context) error {
			return d.withdraw(ctx, key, owner)
		})
	}
	return driver.Grant{}, fmt.Errorf("acquire: unexpected reply %v", reply)
}

// sharedTook reports whether a shared_acquire.lua reply is a grant.
func sharedTook(reply any) bool {
	if token, ok := reply.(int64); ok {
		return token > 0
	}
	r, ok := reply.([]any)
	return ok && len(r) > 0 && r[0] == "ok"
}

// runShared runs shared_release.lua with op for owner on st's key and
// reports whether there was something to act on.
func (d *redisDriver) runShared(ctx context.Context, st *shareState, owner, op string, keep time.Duration) (bool, error) {
	var arg any = 0
	if keep != 0 {
		arg = millis(keep)
	}
	n, err := d.runSharedN(ctx, st, owner, op, arg)
	return n == 1, err
}

// runSharedN runs shared_release.lua with op and arg (ARGV[4]) for owner on
// st's key and returns the n of its reply. With Config.Replicas, a keep, a
// limit or a break that acted (n = 1) waits for the replicas as
// runReplicated does: the error then matches errNotReplicated, beside the
// n.
func (d *redisDriver) runSharedN(ctx context.Context, st *shareState, owner, op string, arg any) (int64, error) {
	var wrote func(any) bool
	if op == "keep" || op == "limit" || op == "break" {
		wrote = sharedActed
	}
	// The channel even without pub/sub: the waiters of Lockers with
	// pub/sub listen on it (see release.lua).
	v, err := d.runReplicatedKeys(ctx, d.shareRelease, wrote, st.keys[:], st.keyArgs, owner, st.channelArg, opArg(op), arg)
	return d.sharedN(v, err)
}

// runSharedArgs is runSharedN with the tombstone id tomb (ARGV[5]), for
// bury.
func (d *redisDriver) runSharedArgs(ctx context.Context, st *shareState, owner, op string, arg any, tomb string) (int64, error) {
	v, err := d.runReplicatedKeys(ctx, d.shareRelease, nil, st.keys[:], st.keyArgs, owner, st.channelArg, opArg(op), arg, tomb)
	return d.sharedN(v, err)
}

// sharedN returns the n of shared_release.lua's reply v, which came with
// err (see runSharedN).
func (d *redisDriver) sharedN(v any, err error) (int64, error) {
	if isWrongType(err) {
		return 0, fmt.Errorf("%w: %w", driver.ErrConflict, errOldLayout)
	}
	if err != nil && !errors.Is(err, errNotReplicated) {
		return 0, classify(err)
	}
	if n, ok := v.(int64); ok {
		return n, err
	}
	reply, _ := v.([]any) // {n, 1}: a PUBLISH was refused
	if len(reply) != 2 || reply[1] != int64(1) {
		return 0, fmt.Errorf("unexpected reply %v", v)
	}
	acted, ok := reply[0].(int64)
	if !ok {
		return 0, fmt.Errorf("unexpected reply %v", v)
	}
	d.noPubSub(errPublishRefused)
	return acted, err
}

// sharedActed reports whether a shared_release.lua reply says it acted.
func sharedActed(reply any) bool {
	if r, ok := reply.([]any); ok && len(r) == 2 {
		reply = r[0]
	}
	return reply == int64(1)
}

// SetLimit implements driver.Limiter: one round trip of
// shared_release.lua, which sets the limit in the key's holds hash and
// wakes the head of its line. With Config.Replicas it returns only once
// WAIT confirms the limit on the replicas. Otherwise the error matches
// errNotReplicated, and the new limit may or may not survive a failover.
func (d *redisDriver) SetLimit(ctx context.Context, key string, limit int) error {
	n, err := d.runSharedN(ctx, d.shareState(key), "", "limit", limit)
	switch {
	case err != nil:
		return fmt.Errorf("setlimit: %w", err)
	case n == 2:
		return fmt.Errorf("setlimit: %w: the key is a read-write lock, not a semaphore", driver.ErrConflict)
	case n == 3:
		return fmt.Errorf("setlimit: %w: the key is a plain lock, not a semaphore", driver.ErrConflict)
	}
	return nil
}

// buryShared returns cause in the driver.Residue of a shared attempt of
// req that was cut (see bury): its cleanup writes tombstone tomb into the
// key's holds hash and withdraws req.Owner, in one run of
// shared_release.lua. It returns an error matching driver.ErrNotHeld when
// the owner neither waited nor held.
func (d *redisDriver) buryShared(req driver.Request, cause error, st *shareState, tomb string) error {
	owner, life := req.Owner, millis(tombLife(req))
	return d.bury(req, cause, func(ctx context.Context) error {
		n, err := d.runSharedArgs(ctx, st, owner, "bury", life, tomb)
		switch {
		case err != nil:
			return err
		case n != 1:
			return driver.ErrNotHeld
		}
		return nil
	})
}

// withdraw takes owner out of key's line, and gives up its hold should an
// attempt whose reply was lost have granted one. It returns an error
// matching driver.ErrNotHeld when there was neither.
func (d *redisDriver) withdraw(ctx context.Context, key, owner string) error {
	ok, err := d.runShared(ctx, d.shareState(key), owner, "leave", 0)
	switch {
	case err != nil:
		return err
	case !ok:
		return driver.ErrNotHeld
	}
	return nil
}

// isShared reports whether l is a shared hold.
func isShared(l driver.Lease) bool {
	_, ok := l.State.(*shareState)
	return ok
}

// stateOf returns the state of shared hold l.
func stateOf(l driver.Lease) *shareState {
	if st, ok := l.State.(*shareState); ok && st != nil {
		return st
	}
	return newShareState(l.Key)
}

// releaseShared ends l's hold and wakes the head of the key's line.
func (d *redisDriver) releaseShared(ctx context.Context, l driver.Lease) error {
	ok, err := d.runShared(ctx, stateOf(l), l.Owner, "release", 0)
	switch {
	case err != nil:
		return fmt.Errorf("release: %w", err)
	case !ok:
		return fmt.Errorf("release: %w", driver.ErrNotHeld)
	}
	return nil
}

// keepShared marks l's hold kept (renewals refuse it) and sets its expiry
// remaining from now.
func (d *redisDriver) keepShared(ctx context.Context, l driver.Lease, remaining time.Duration) error {
	ok, err := d.runShared(ctx, stateOf(l), l.Owner, "keep", remaining)
	switch {
	case err != nil:
		return fmt.Errorf("keep: %w", err)
	case !ok:
		return fmt.Errorf("keep: %w", driver.ErrNotHeld)
	}
	return nil
}

// breakShared ends every shared hold of key; it reports whether there was
// one.
func (d *redisDriver) breakShared(ctx context.Context, key string) (bool, error) {
	return d.runShared(ctx, d.shareState(key), "", "break", 0)
}

// sharedRead is what Inspect and List read of a shared key: its holds hash
// and line length, and the holders of the layout before the holds hash
// (a sorted set under the same name, and the meta hash), of which one
// read fails with WRONGTYPE.
type sharedRead struct {
	holds, oldMeta *goredis.MapStringStringCmd
	old            *goredis.ZSliceCmd
	queued         *goredis.IntCmd
}

// readSharedOn queues the reads of the shared key named ks on pipe.
func readSharedOn(ctx context.Context, pipe goredis.Pipeliner, ks Keys) sharedRead {
	return sharedRead{
		holds:   pipe.HGetAll(ctx, ks.Holders),
		old:     pipe.ZRangeWithScores(ctx, ks.Holders, 0, -1),
		oldMeta: pipe.HGetAll(ctx, ks.Meta),
		queued:  pipe.ZCard(ctx, ks.SharedQueue),
	}
}

// isWrongType reports whether err is Redis's WRONGTYPE error.
func isWrongType(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") }

// pipeErr is the error of a pipeline's Exec that matters to readSharedOn's
// callers: nil for a missing key, or a read of the other layout.
func pipeErr(err error) error {
	if err == nil || errors.Is(err, goredis.Nil) || isWrongType(err) {
		return nil
	}
	return err
}

// holdsOf returns the key's holds hash, made from the older layout's
// holders when the key has those.
func (r sharedRead) holdsOf() (map[string]string, error) {
	err := r.holds.Err()
	if !isWrongType(err) {
		return r.holds.Val(), err
	}
	if err := errors.Join(r.old.Err(), r.oldMeta.Err()); err != nil {
		return nil, err
	}
	meta := r.oldMeta.Val()
	holds := map[string]string{" kind": meta[" kind"], " limit": meta[" limit"]}
	for _, z := range r.old.Val() {
		owner, _ := z.Member.(string)
		if rec, ok := meta[owner]; ok {
			holds[owner] = strconv.FormatInt(int64(z.Score), 10) + " " + rec
		}
	}
	return holds, nil
}

// status returns the Status of the shared key at the server time now, and
// whether the key has shared state.
func (r sharedRead) status(now time.Time) (driver.Status, bool, error) {
	var st driver.Status
	holds, err := r.holdsOf()
	if err == nil {
		err = r.queued.Err()
	}
	// Tombstones alone are no shared state (see shared_lib.lua).
	delete(holds, " cut")
	if err != nil || len(holds) == 0 {
		return st, false, err
	}
	return st, true, inspectShared(&st, now, holds, r.queued.Val())
}

// inspectShared fills st from a shared key's holds hash and line length,
// read at the server time now; expired holders are left out.
func inspectShared(st *driver.Status, now time.Time, holds map[string]string, queued int64) error {
	st.Waiters = int(queued)
	if holds[" kind"] == "permits" {
		st.Limit, _ = strconv.Atoi(holds[" limit"])
	}
	for owner, rec := range holds {
		if strings.HasPrefix(owner, " ") {
			continue
		}
		f := strings.SplitN(rec, " ", 7)
		if len(f) != 7 {
			return fmt.Errorf("inspect: malformed holder record %q", rec)
		}
		expires, err0 := strconv.ParseInt(f[0], 10, 64)
		h := driver.Holder{Label: f[6], Expires: time.UnixMilli(expires).UTC()}
		if err0 == nil && !h.Expires.After(now) {
			continue
		}
		mode, limit, ok := strings.Cut(f[1], ":") // "permits:<limit>", or an older version's "permits"
		switch mode {
		case "permits":
			h.Mode = driver.Permits
			if n, err := strconv.Atoi(limit); ok && err == nil && holds[" kind"] == "" {
				st.Limit = n // a hash of holds alone: its records carry the limit
			}
		case "read":
			h.Mode = driver.Read
		case "write":
			h.Mode = driver.Write
		}
		var err1, err2, err3 error
		h.Weight, err1 = strconv.Atoi(f[2])
		h.Token, err2 = strconv.ParseUint(f[3], 10, 64)
		acquired, err3 := strconv.ParseInt(f[4], 10, 64)
		if err := errors.Join(err0, err1, err2, err3); err != nil {
			return fmt.Errorf("inspect: malformed holder record %q", rec)
		}
		h.Acquired = time.UnixMilli(acquired).UTC()
		st.Holders = append(st.Holders, h)
	}
	// Newest last, as the Status describes the newest holder.
	slices.SortFunc(st.Holders, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
	if n := len(st.Holders); n > 0 {
		newest := st.Holders[n-1]
		st.Held, st.Label, st.Token = true, newest.Label, newest.Token
		st.Acquired, st.Expires = newest.Acquired, newest.Expires
	}
	return nil
}

// Subscribe implements driver.Notifier for the waits of shared holds (a
// plain Lock queues through Acquire): the key's channel for this Locker
// wakes the wait when a hold ends or the line moves. Without pub/sub the
// channel never receives, and the wait polls.
func (d *redisDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	w, reg, err := d.notify.register(key, "", false)
	if err != nil {
		return nil, nil, err
	}
	if w == nil { // no pub/sub
		return nil, func() {}, nil
	}
	d.notify.held(key)
	return w.wake, reg.leave, nil
}
