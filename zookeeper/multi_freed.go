package zookeeper

import "path"

// maxFreed bounds how many key nodes a Locker remembers as freed.
const maxFreed = 1024

// keyVersion is a key node's data version in one incarnation of the node,
// which its czxid names.
type keyVersion struct {
	version int32
	czxid   int64
	// contended marks a key that another took between two takes of this
	// Locker: it is not recalled, but listed.
	contended bool
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
	if kv, ok := d.free[p]; !ok || !kv.contended {
		d.remember(p, h.granted)
	}
}

// remember records kv for the key node p, unless maxFreed others are
// recorded; d.mu is held.
func (d *zkDriver) remember(p string, kv keyVersion) {
	if _, ok := d.free[p]; !ok && len(d.free) >= maxFreed {
		return
	}
	if d.free == nil {
		d.free = make(map[string]keyVersion)
	}
	d.free[p] = kv
}

// contend marks keys contended: this Locker recalled them, and another
// took one of them since it freed them. Their takes list them from now on:
// a recall that fails costs a request and a round trip more than a
// listing.
func (d *zkDriver) contend(keys []multiKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		d.remember(k.parent, keyVersion{contended: true})
	}
}

// recall fills keys with what freed remembered of every key, and forgets
// it. It reports false, and leaves keys and what it remembers as they
// were, when it remembers some key not, or as contended.
func (d *zkDriver) recall(keys []multiKey) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		if kv, ok := d.free[k.parent]; !ok || kv.contended {
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
