package zookeeper

import (
	"maps"
	"path"
	"time"
)

// maxFreed bounds how many key nodes a Locker remembers as freed.
const maxFreed = 1024

// keyVersion is a key node's data version in one incarnation of the node,
// which its czxid names, as a Locker remembers it.
type keyVersion struct {
	version int32
	czxid   int64
	// contended marks a key that another took between two takes of this
	// Locker: it is listed, not recalled.
	contended bool
	at        time.Time // when it was recorded
}

// freed records that the node of h is deleted. When h came from a
// multi-key grant, its queue had no other lock node when the key node was
// at h.granted; it has none as long as the node is still there at that
// version. A multi-key take of keys all remembered so (recall) can then
// skip the listings: its check of each version, and of each czxid in the
// reply, tells whether the key is still free.
func (d *zkDriver) freed(h *hold) {
	if h.granted.czxid == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p := path.Dir(h.path)
	if kv, ok := d.free[p]; ok && kv.contended && d.current(kv) {
		return
	}
	kv := h.granted
	kv.at = time.Now()
	d.remember(p, kv)
}

// contend marks keys contended: this Locker recalled them, and another
// took one of them since it freed them. Their takes list them for the
// validity from now on: a recall that fails costs a request and a round
// trip more than a listing.
func (d *zkDriver) contend(keys []multiKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		d.remember(k.parent, keyVersion{contended: true, at: time.Now()})
	}
}

// current reports whether kv was recorded within the validity. The bound
// keeps short the time in which a key node can be deleted, made again,
// and brought back to the version remembered, by others' locks: a take
// that recalled it would then hold its other keys until it sees the
// czxid in the reply, and gives them back.
func (d *zkDriver) current(kv keyVersion) bool {
	return time.Since(kv.at) <= time.Duration(d.validity.Load())
}

// remember records kv for the key node p. When maxFreed others are
// recorded, it first forgets those past the validity, and records nothing
// if that frees no room. d.mu is held.
func (d *zkDriver) remember(p string, kv keyVersion) {
	if _, ok := d.free[p]; !ok && len(d.free) >= maxFreed {
		maps.DeleteFunc(d.free, func(_ string, kv keyVersion) bool { return !d.current(kv) })
		if len(d.free) >= maxFreed {
			return
		}
	}
	if d.free == nil {
		d.free = make(map[string]keyVersion)
	}
	d.free[p] = kv
}

// recall fills keys with what freed remembered of every key, and forgets
// it. It reports false, and leaves keys as they were, when it remembers
// some key not, as contended, or from longer ago than the validity.
func (d *zkDriver) recall(keys []multiKey) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		if kv, ok := d.free[k.parent]; !ok || kv.contended || !d.current(kv) {
			return false
		}
	}
	for i := range keys {
		k := &keys[i]
		kv := d.free[k.parent]
		delete(d.free, k.parent)
		k.children, k.version, k.czxid, k.missing = nil, kv.version, kv.czxid, false
	}
	return true
}
