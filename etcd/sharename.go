package etcd

import "strconv"

// A shared request's key is named after the session's lease and a slot:
// the lowest number that no other shared request of the session has in
// that directory. Later attempts of a request find the key its first one
// created under the same name. A slot is free again once its key is known
// deleted (a release, a cleanup, a Keep that moved it).
//
// Reused names keep the directory's index small. etcd keeps a deleted key
// in its index until it compacts, and every shared request reads the
// directory whole: a fresh name per request would make each request on a
// key slower the more often the key was taken.
//
// A slot's name may still be taken when a request gets it: a write of
// unknown outcome that landed late, or a key a Keep moved. The request
// then names its key after its owner token, a name no other request has,
// and the slot stays out of use until the session ends.
//
// Nothing may tell a key by its name alone. A delete compares the key's
// value, which holds its owner token; a claim and a renewal's read compare
// its create revision; the key watch matches a deletion to a lock created
// before it (keywatch.go); a queued request's view learns only from the
// deletions after its read, and belongs to the value it was kept for
// (sharedview.go).

// shareName is the name of a shared request's key on a session.
type shareName struct {
	key string
	// mine: a transaction of the request created the key, or the name
	// is the request's own (renameShare).
	mine bool
}

// shareName returns the name of the key of owner's shared request in dir
// on s: the name it has, or a free slot's.
func (d *etcdDriver) shareName(s *session, dir, owner string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := s.shares[owner]; ok {
		return n.key
	}
	if s.shares == nil {
		s.shares, s.named = map[string]*shareName{}, map[string]bool{}
	}
	base := dir + s.hex + "."
	for i := 0; ; i++ {
		if k := base + strconv.Itoa(i); !s.named[k] {
			s.shares[owner], s.named[k] = &shareName{key: k}, true
			return k
		}
	}
}

// createdShare records that st's key was created under its name.
func (d *etcdDriver) createdShare(st *lockState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := st.sess.shares[st.owner]; ok && n.key == st.key {
		n.mine = true
	}
}

// takenShare reports whether st's name is another key's: its request
// never created a key under it.
func (d *etcdDriver) takenShare(st *lockState) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := st.sess.shares[st.owner]
	return ok && n.key == st.key && !n.mine
}

// renameShare gives st's request a name of its own, after its slot's name
// turned out taken by another key. The slot stays out of use.
func (d *etcdDriver) renameShare(st *lockState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := st.dir + st.sess.hex + "." + st.owner
	st.sess.shares[st.owner], st.sess.named[k] = &shareName{key: k, mine: true}, true
}

// freeShareName frees the name of st's key, a shared request's, once the
// key is known deleted.
func (d *etcdDriver) freeShareName(st *lockState) {
	if !st.shared {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := st.sess
	if n, ok := s.shares[st.owner]; ok && n.key == st.key {
		delete(s.shares, st.owner)
		delete(s.named, n.key)
	}
}
