package zookeeper

import "path"

// maxFreed bounds how many key nodes a Locker remembers as freed.
const maxFreed = 1024

// keyVersion is a key node's data version in one incarnation of the node,
// which its czxid names.
type keyVersion struct {
	version int32
	czxid   int64
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
	if d.free == nil {
		d.free = make(map[string]keyVersion)
	}
	if len(d.free) < maxFreed {
		d.free[path.Dir(h.path)] = h.granted
	}
}

// recall fills keys with what freed remembered of every key, and forgets
// it. It reports false, and leaves keys and what it remembers as they
// were, when it remembers some key not.
func (d *zkDriver) recall(keys []multiKey) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		if _, ok := d.free[k.parent]; !ok {
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
