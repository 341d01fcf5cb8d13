package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/driver"
)

//go:embed multi_acquire.lua
var multiAcquireLua string

// maxMultiKeys is the most keys TryAcquireMulti takes in one script; more
// are taken one by one, so that one script never blocks the server for
// long.
const maxMultiKeys = 256

// TryAcquireMulti implements driver.MultiAcquirer: one script takes every
// key or none. A key with waiters counts as held, unless the Locker is
// unfair. It answers driver.ErrNotAtomic, without a round trip, for a
// *goredis.Ring, for Cluster keys in different hash slots and for more than
// maxMultiKeys keys; and when the server refuses the keys as cross-slot (a
// wrapped Cluster client).
func (d *redisDriver) TryAcquireMulti(ctx context.Context, reqs []driver.Request) ([]driver.Grant, error) {
	c, err := d.newMultiCall(reqs, false)
	if err != nil {
		return nil, err
	}
	return d.runMulti(ctx, reqs, c)
}

// multiCall is the script call of a multi-key attempt: the same for every
// attempt of one wait, but for the records it lists and the attempt's
// number.
type multiCall struct {
	keys  []string
	boxed []any        // keys, boxed for runScript (nil: not)
	names []*lockNames // of each request
	args  []any        // args[3] is the record (watch), args[5] unwatch, args[6] seq
	ttls  []int64
	// seq numbers the attempts of a wait (setSeq); rec[i] is the seq of
	// the last attempt that recorded the wait with lock i
	// (multi_acquire.lua), 0 when none did or a release consumed that
	// record: the next successful attempt removes the others.
	seq uint64
	rec []uint64

	// The slices above for a set of at most multiInline keys, in the
	// multiCall's own allocation.
	inKeys  [5 * multiInline]string
	inAny   [7 + 7*multiInline]any // args, then boxed
	inNames [multiInline]*lockNames
	inTTLs  [multiInline]int64
	inRec   [multiInline]uint64
}

// multiInline is the most keys whose multiCall takes one allocation.
const multiInline = 4

// watchField returns the field that records wait wid of the Locker lid in
// a key's waiters hash (see multi_acquire.lua and watch.lua), in one
// allocation.
func watchField(lid string, wid uint64) string {
	var buf [48]byte
	b := append(buf[:0], " watch "...)
	b = append(b, lid...)
	b = append(b, ' ')
	return string(strconv.AppendUint(b, wid, 36))
}

// wid returns the id of the wait that call's records name ("" for none):
// the last word of its field.
func (c *multiCall) wid() string {
	field, _ := c.args[3].(string)
	return fieldWid(field)
}

// fieldWid returns the id of the wait that field (watchField, or "")
// names: its last word.
func fieldWid(field string) string {
	if field == "" {
		return ""
	}
	return field[strings.LastIndexByte(field, ' ')+1:]
}

// setSeq numbers the next attempt seq (from 1): an integer, which the
// runtime boxes without an allocation below 256.
func (c *multiCall) setSeq(seq uint64) {
	c.seq = seq
	c.args[6] = int64(seq)
}

// record notes that the attempt numbered c.seq recorded the wait with lock
// i (from 1).
func (c *multiCall) record(i int64) {
	if c.args[3] == "" {
		return
	}
	was := c.rec[i-1]
	c.rec[i-1] = c.seq
	if was == 0 {
		c.unwatchChanged()
	}
}

// consumed notes that a release consumed the record of lock i (from 0)
// that the attempt numbered seq wrote: a later attempt's record is still
// there.
func (c *multiCall) consumed(i int, seq uint64) {
	if c.rec[i] != 0 && c.rec[i] == seq {
		c.rec[i] = 0
		c.unwatchChanged()
	}
}

// unwatchChanged rebuilds the unwatch argument from c.rec.
func (c *multiCall) unwatchChanged() {
	var buf [32]byte
	b := buf[:0]
	for j, seq := range c.rec {
		if seq != 0 {
			b = strconv.AppendInt(b, int64(j+1), 10)
			b = append(b, ' ')
		}
	}
	c.args[5] = string(b)
}

// newMultiCall checks reqs and builds the script call that takes them;
// with watch set, an attempt that finds a key held records the wait with
// that key under a field of its own (watchField), so that the release that
// frees the key wakes its Locker.
func (d *redisDriver) newMultiCall(reqs []driver.Request, watch bool) (*multiCall, error) {
	if len(reqs) > maxMultiKeys {
		return nil, fmt.Errorf("acquire: %w: %d keys, at most %d in one script", driver.ErrNotAtomic, len(reqs), maxMultiKeys)
	}
	if _, ok := d.client.(*goredis.Ring); ok {
		return nil, fmt.Errorf("acquire: %w: a Ring spreads the keys over its shards", driver.ErrNotAtomic)
	}
	n := len(reqs)
	c := &multiCall{seq: 1}
	var anys []any // args, then boxed
	if n <= multiInline {
		c.keys, anys, c.names, c.ttls, c.rec = c.inKeys[:5*n:5*n], c.inAny[:7+7*n:7+7*n], c.inNames[:n:n], c.inTTLs[:n:n], c.inRec[:n:n]
	} else {
		c.keys, anys, c.names, c.ttls, c.rec = make([]string, 5*n), make([]any, 7+7*n), make([]*lockNames, n), make([]int64, n), make([]uint64, n)
	}
	keys, ttls, names := c.keys, c.ttls, c.names // keys grouped by kind, see multi_acquire.lua
	field := ""
	if watch {
		field = watchField(d.lid, d.waits.Add(1))
	}
	args := anys[: 0 : 7+2*n]
	args = append(args, d.labelArgOf(reqs[0].Label), d.retentionArg, d.unfairArg, field, d.staleArg(reqs[0].TTL), "", int64(1))
	for i, req := range reqs {
		if err := checkOwner(req.Owner); err != nil {
			return nil, err
		}
		names[i] = d.lockNames(req.Key)
		k := &names[i].keys // lock, fence, queue, waiters, holds
		keys[i], keys[n+i], keys[2*n+i], keys[3*n+i], keys[4*n+i] = k[0], k[1], k[2], k[4], k[3]
		var ttlArg any
		ttlArg, ttls[i] = d.ttlArgs(req.TTL)
		args = append(args, req.Owner, ttlArg)
	}
	if _, ok := d.client.(*goredis.ClusterClient); ok {
		slot := hashSlot(keys[0])
		for _, k := range keys[1:] {
			if hashSlot(k) != slot {
				return nil, fmt.Errorf("acquire: %w: the keys are in different Cluster hash slots", driver.ErrNotAtomic)
			}
		}
	}
	c.args = args
	if names[0].keyArgs != nil {
		boxed := anys[7+2*n:]
		c.boxed = boxed
		for i, nm := range names {
			k := nm.keyArgs
			boxed[i], boxed[n+i], boxed[2*n+i], boxed[3*n+i], boxed[4*n+i] = k[0], k[1], k[2], k[4], k[3]
		}
	}
	return c, nil
}

// runMulti makes the attempt c, which takes reqs.
func (d *redisDriver) runMulti(ctx context.Context, reqs []driver.Request, c *multiCall) ([]driver.Grant, error) {
	keys, ttls := c.keys, c.ttls
	args, boxed, tomb := d.withTomb(ctx, reqs[0], keys, c.boxed)
	v, err := d.runReplicatedKeys(ctx, d.multiAcquire, multiTook, args, boxed, c.args...)
	if cut := d.buryCut(ctx, reqs[0], err, tomb, func(ctx context.Context, _, _ string) error { return d.undoAll(ctx, reqs) }); cut != nil {
		return nil, cut
	}
	if errors.Is(err, errNotReplicated) {
		return nil, d.undoMulti(ctx, reqs, fmt.Errorf("acquire: %w", err))
	}
	if err != nil {
		if hasPrefix(err, "CROSSSLOT") {
			return nil, fmt.Errorf("acquire: %w: %w", driver.ErrNotAtomic, err)
		}
		err = fmt.Errorf("acquire: %w", classify(err))
		if maybeExecuted(err) {
			return nil, d.undoMulti(ctx, reqs, err)
		}
		return nil, err
	}
	reply, _ := v.([]any)
	if len(reply) == len(reqs) && multiTook(v) {
		grants := make([]driver.Grant, len(reqs))
		for i, r := range reply {
			s, _ := r.(string)
			token, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, d.undoMulti(ctx, reqs, fmt.Errorf("acquire: malformed token %q", s))
			}
			grants[i] = driver.Grant{Token: token, Validity: time.Duration(ttls[i]) * time.Millisecond, State: c.names[i]}
		}
		d.retaken(reqs)
		return grants, nil
	}
	if len(reply) >= 3 {
		i, _ := reply[1].(int64)
		switch {
		case reply[0] == "held" && len(reply) == 3 && i >= 1 && int(i) <= len(reqs):
			c.record(i)
			ms, _ := reply[2].(int64)
			return nil, &keyHeldError{key: reqs[i-1].Key, held: driver.Held(time.Duration(ms) * time.Millisecond)}
		case reply[0] == "shared" && len(reply) == 4:
			return nil, fmt.Errorf("acquire %s: %w: the key is %s, not a plain lock", reqKey(reqs, i), driver.ErrConflict, shareKindOf(reply[2], reply[3]))
		}
	}
	return nil, fmt.Errorf("acquire: unexpected reply %v", v)
}

// keyHeldError is the error of a multi-key attempt that found key held. A
// waiting LockMulti reads only its Remaining: its text is made when asked.
type keyHeldError struct {
	key  string
	held error // a *driver.HeldError
}

func (e *keyHeldError) Error() string {
	return "acquire " + strconv.Quote(e.key) + ": " + e.held.Error()
}

func (e *keyHeldError) Unwrap() error { return e.held }

// reqKey names the store key of reqs[i-1] (i from the script, from 1).
func reqKey(reqs []driver.Request, i int64) string {
	if i < 1 || int(i) > len(reqs) {
		return "?"
	}
	return strconv.Quote(reqs[i-1].Key)
}

// multiTook reports whether a multi_acquire.lua reply says the locks were
// taken: a list of tokens, not a status.
func multiTook(reply any) bool {
	r, ok := reply.([]any)
	if !ok || len(r) == 0 {
		return false
	}
	s, ok := r[0].(string)
	return ok && s != "held" && s != "shared"
}

// undoMulti gives up every lock reqs may have taken, as leave does for one,
// and returns cause; wrapped in a driver.Residue that tries them all again
// when the store could not be reached.
func (d *redisDriver) undoMulti(ctx context.Context, reqs []driver.Request, cause error) error {
	out := func(ctx context.Context) error { return d.undoAll(ctx, reqs) }
	if d.cuts(ctx) {
		// The caller returns when ctx ends (driver.Info.PromptCancel).
		return d.cleanUpCut(ctx, cause, out)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(reqs[0].TTL, cleanupTimeout))
	defer cancel()
	if err := out(ctx); err != nil {
		d.logger.Warn("locker: redis: could not undo a multi-key acquisition; retrying in the background", "keys", len(reqs), "err", err)
		return residue(cause, out)
	}
	return cause
}

// undoAll gives up every lock reqs may have taken, and their places in
// line: nil when nothing was left.
func (d *redisDriver) undoAll(ctx context.Context, reqs []driver.Request) error {
	var errs []error
	for _, req := range reqs {
		if err := d.leaveQueue(ctx, req.Key, req.Owner); err != nil && !errors.Is(err, driver.ErrNotHeld) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
