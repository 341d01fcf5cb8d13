package redis

import (
	"crypto/rand"
	"encoding/hex"
	"hash/fnv"
	"hash/maphash"
	"strconv"
	"strings"
	"sync/atomic"
)

// The Redis names of one lock. All of them carry the same Cluster hash tag,
// so that every script touches one slot, and the release channel is named
// after the same slot.
//
// For a store key s (the caller's key with the Locker's prefix) that contains
// no '}':
//
//	lock     locker:{s}        string "<owner> <token> <label>", PX = TTL
//	fence    locker:{s}:fence  string, the last fencing token
//	queue    locker:{s}:q      sorted set of waiting owners, by arrival
//	waiters  locker:{s}:w      hash owner -> "<deadline> <seq> <ttl> <lid> w<wake> <label>",
//	                           and " woke" -> "<until> <owner>" (unfair mode)
//	                           and " watch <lid> <wid>" -> "<seq>" (a LockMulti to wake),
//	                           with " watched" -> "1" while any may be left
//	cut      locker:{s}:cut:<owner>  a tombstone: the lock attempts of
//	                           owner, cut when their ctx ended, take
//	                           nothing (cut.go); expires after the TTL
//	                           (a shared hold's are in its holds hash,
//	                           shared_lib.lua)
//	         locker:{s}:cut:<Locker id>  the same for the attempts of a
//	                           Locker whose ctx ended as it closed
//	channel  locker:{s}:rel    base of the pub/sub channels: a Locker
//	                           with waiters on s listens on
//	                           locker:{s}:rel:<its 16-hex-digit id>
//
// A Locker's inbox, the list of hand-overs to its waiters (inbox.go), is
// one name for all its keys, outside any key's slot:
//
//	inbox    locker:inbox:<its 16-hex-digit id>
//
// Redis hashes the text between the first '{' and the first '}' after it, so
// these share the slot of s. A '}' inside s would end the tag early (and one
// at its start would leave the tag empty, so that each name hashed whole and
// the names landed on different slots). Such keys use a tag made of the
// 64-bit FNV-1a hash of s instead, followed by the kind and s itself:
//
//	lock     locker:#{<16 hex digits>}:lock:s
//	fence    locker:#{<16 hex digits>}:fence:s   (and so on)
//
// Both forms keep s verbatim, so distinct store keys never share a name,
// whatever their hash, and the two forms never meet ("locker:{" versus
// "locker:#").
const namespace = "locker:"

// Kinds of names.
const (
	kindLock    = "lock"
	kindFence   = "fence"
	kindQueue   = "q"
	kindWaiters = "w"
	kindChannel = "rel"
)

// name returns the Redis name of the given kind for store key s.
func name(kind, s string) string {
	var b strings.Builder
	b.Grow(nameLen(kind, s))
	writeName(&b, kind, s)
	return b.String()
}

// fillNames sets out[i] to name(kinds[i], s), all in one string.
func fillNames(out []string, s string, kinds ...string) {
	n := 0
	for _, k := range kinds {
		n += nameLen(k, s)
	}
	var b strings.Builder
	b.Grow(n)
	for _, k := range kinds {
		writeName(&b, k, s)
	}
	all := b.String()
	for i, k := range kinds {
		n := nameLen(k, s)
		out[i], all = all[:n], all[n:]
	}
}

// nameLen returns len(name(kind, s)).
func nameLen(kind, s string) int {
	if strings.IndexByte(s, '}') < 0 {
		if kind == kindLock {
			return len(namespace) + len(s) + 2
		}
		return len(namespace) + len(s) + len(kind) + 3
	}
	return len(namespace) + 21 + len(kind) + len(s)
}

// writeName writes name(kind, s) to b.
func writeName(b *strings.Builder, kind, s string) {
	b.WriteString(namespace)
	if strings.IndexByte(s, '}') < 0 {
		b.WriteByte('{')
		b.WriteString(s)
		b.WriteByte('}')
		if kind != kindLock {
			b.WriteByte(':')
			b.WriteString(kind)
		}
		return
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	var buf [16]byte
	hex := strconv.AppendUint(buf[:0], h.Sum64(), 16)
	b.WriteString("#{")
	b.WriteString(strings.Repeat("0", 16-len(hex)))
	b.Write(hex)
	b.WriteString("}:")
	b.WriteString(kind)
	b.WriteByte(':')
	b.WriteString(s)
}

// Keys are the Redis names of one lock (see the naming rules above), for
// operators who inspect or repair the store with redis-cli, and for ACL
// rules that must cover them.
type Keys struct {
	Lock    string // string "<owner> <token> <label>", PX = TTL
	Fence   string // string, the last fencing token
	Queue   string // sorted set of waiting owners, by arrival
	Waiters string // hash owner -> "<deadline> <seq> <ttl> <lid> w<wake> <label>", and " woke" -> "<until> <owner>"
	// Holders, SharedQueue and SharedWaiters hold the key's semaphore
	// permits or read-write holds (see shared.go).
	Holders       string // hash owner -> its hold with its expiry and the key's kind and limit; " kind", " limit", " q" once the key had waiters or a new limit; " cut", the tombstones of cut attempts
	Meta          string // hash of holder records of versions before the holds hash; never written
	SharedQueue   string // sorted set of waiting owners, by arrival
	SharedWaiters string // hash owner -> "<deadline> <mode> <weight> <lid>"
	// Channel is the pub/sub channel of releases; hand-overs go to
	// Channel + ":" + the id of the waiter's Locker (16 hex digits).
	Channel string
}

// KeysOf returns the Redis names of the lock on store key s: the key a
// caller passes to Lock with the Locker's prefix (locker.WithPrefix) before
// it.
func KeysOf(s string) Keys {
	return Keys{
		Lock:    name(kindLock, s),
		Fence:   name(kindFence, s),
		Queue:   name(kindQueue, s),
		Waiters: name(kindWaiters, s),
		Channel: name(kindChannel, s),

		Holders:       name(kindShareHolds, s),
		Meta:          name(kindShareOldMeta, s),
		SharedQueue:   name(kindShareQueue, s),
		SharedWaiters: name(kindShareWaiters, s),
	}
}

// lockKey returns the Redis key of the lock on store key s.
func lockKey(s string) string { return name(kindLock, s) }

// fenceKey returns the Redis key of the fencing counter of store key s.
func fenceKey(s string) string { return name(kindFence, s) }

// channelName returns the base of the pub/sub channels of store key s: the
// Locker with id lid hears of hand-overs of s to its waiters on
// channelName(s) + ":" + lid.
func channelName(s string) string { return name(kindChannel, s) }

// newLockerID returns a Locker id for its channels: 16 hex digits, so that
// a channel name (base, then ":" and the id) never equals another key's.
func newLockerID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// scriptKeys returns KEYS of acquire.lua and release.lua for store key s:
// lock, fence, queue, waiters, and the holds hash of shared holds.
func scriptKeys(s string) []string {
	return []string{name(kindLock, s), name(kindFence, s), name(kindQueue, s), name(kindWaiters, s), name(kindShareHolds, s)}
}

// keyNames are the names the scripts of one use of a store key take: its
// five KEYS and its release channel, made in one allocation, with the
// channel and (when runScript can use them) the keys boxed.
type keyNames struct {
	key     string    // the store key
	keys    [5]string // the scripts' KEYS, in their order
	channel string    // channelName
	// channelArg is channel, boxed for the scripts' arguments.
	channelArg any
	// keyArgs are keys, boxed for runScript (nil when it cannot use
	// them); boxes holds them.
	keyArgs []any
	boxes   [5]any
	// closing are keys with the Locker's tombstone of the key (cutKey
	// with the Locker's id), for the lock attempts whose ctx ends only
	// when the Locker closes; nil unless its client cuts calls, and for
	// shared holds. One tombstone serves all such attempts: the Locker
	// makes none after it closes.
	closing *tombKeys
}

// tombKeys are the KEYS of an attempt that may be cut: a key's five, then
// a tombstone (cut.go), boxed as keyNames' are, in one allocation.
type tombKeys struct {
	tomb  string
	keys  [6]string
	args  []any
	boxes [6]any
}

// withTomb returns n's keys with tomb appended.
func (n *keyNames) withTomb(tomb string) *tombKeys {
	t := &tombKeys{tomb: tomb}
	copy(t.keys[:], n.keys[:])
	t.keys[len(n.keys)] = tomb
	if n.keyArgs != nil {
		copy(t.boxes[:], n.keyArgs)
		// go-redis sends a *string as its string; boxing the pointer
		// allocates nothing.
		t.boxes[len(n.keys)] = &t.keys[len(n.keys)]
		t.args = t.boxes[:]
	}
	return t
}

// storeKey is the store key n names.
func (n *keyNames) storeKey() string { return n.key }

// name sets n to the names of store key s: keys[i] of kinds[i], for the
// five KEYS, then the channel, of kinds[5] (kindChannel).
func (n *keyNames) name(s string, kinds ...string) {
	n.key = s
	var all [len(n.keys) + 1]string
	fillNames(all[:], s, kinds...)
	copy(n.keys[:], all[:])
	n.channel = all[len(n.keys)]
	n.channelArg = n.channel
}

// lockNames are the names a plain lock's scripts use (scriptKeys), made
// once per store key while it is in the Locker's names cache (see
// namesCache): the Lease.State of the lock, so that its attempts, renewals
// and release name nothing again. Nothing changes a lockNames once it is
// made: acquisitions of one key may share it.
type lockNames struct{ keyNames }

// namesCacheSize is how many store keys each of a Locker's names caches
// holds.
const namesCacheSize = 64

// namesCache holds the names of the store keys a Locker used last, one per
// slot of a hash of the key, so that a Locker that takes the same keys
// again makes their names, and boxes them, once. N is the names of one use
// of a key: lockNames for plain locks, shareState for shared holds, each
// in a cache of its own. A key whose slot another key took is named again.
// Its size is fixed: a Locker that takes many keys keeps no more of them.
// Nothing changes an N once it is cached: acquisitions of one key may
// share it.
type namesCache[N any, P interface {
	*N
	storeKey() string
}] struct {
	seed  maphash.Seed
	slots [namesCacheSize]atomic.Pointer[N]
}

// get returns the names of store key s: from the cache when s is there,
// else made by make(d, s) and cached.
func (c *namesCache[N, P]) get(d *redisDriver, s string, make func(*redisDriver, string) P) P {
	slot := &c.slots[maphash.String(c.seed, s)%namesCacheSize]
	if n := P(slot.Load()); n != nil && n.storeKey() == s {
		return n
	}
	n := make(d, s)
	slot.Store((*N)(n))
	return n
}

// lockNames returns the names of the lock on store key s, with its keys
// boxed when runScript can use them: from the cache when s is there.
func (d *redisDriver) lockNames(s string) *lockNames {
	return d.names.get(d, s, boxedLockNames)
}

// boxedLockNames returns newLockNames(s) with its keys boxed for d.
func boxedLockNames(d *redisDriver, s string) *lockNames {
	n := newLockNames(s)
	n.box(d)
	return n
}

// box boxes n's keys for d's runScript, and makes their closingKeys when
// d's calls can end at Close.
func (n *keyNames) box(d *redisDriver) {
	n.keyArgs = d.boxKeys(n.boxes[:], n.keys[:])
	if d.closing != nil {
		n.closing = n.withTomb(cutKey(n.key, d.lid))
	}
}

// boxKeys boxes keys into boxes (of the same length) and returns them, or
// nil when runScript cannot use them.
func (d *redisDriver) boxKeys(boxes []any, keys []string) []any {
	if d.proc == nil {
		return nil
	}
	for i, k := range keys {
		boxes[i] = k
	}
	return boxes
}

// newLockNames returns the names of the lock on store key s, in one
// allocation.
func newLockNames(s string) *lockNames {
	n := &lockNames{}
	n.name(s, kindLock, kindFence, kindQueue, kindWaiters, kindShareHolds, kindChannel)
	return n
}
