package etcd

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A lock's key can vanish while the lease it is on lives: an operator
// deletes it, or ForceUnlock runs in another process. RenewBatch reads no
// key: a watch on the session's keys in each key directory where it holds
// a lock reports the lock lost the moment its key is deleted.
//
// The session's keys in a directory are the directory followed by the
// lease ID, so one watch covers them all and no other Locker's. The watch
// starts at the first renewal of a lock there (a lock released sooner never
// costs one), from the revision after the oldest creation among the
// session's locks there: a deletion before the watch started is replayed.
// It ends with the session's last lock in the directory.
//
// A lock the watch may have missed is read once at a renewal, and the watch
// vouches for it from then on: one granted after the watch started at a
// revision past its creation, one whose key's name the watch saw deleted
// while the lock was not yet tracked, and every lock of a directory whose
// watch ended by itself (a compacted start, a member without a leader).
// That watch restarts from the read.

// keyDir is what a session knows of its keys in one key directory. Its
// fields are guarded by etcdDriver.mu.
type keyDir struct {
	// locks are the session's tracked locks in the directory, by key.
	locks map[string][]*lockState
	// watching: a watch reports the deletions of the session's keys in
	// the directory from revision from on.
	watching bool
	from     int64
	// ended: a watch ended by itself; the directory's locks are read
	// before a new one starts.
	ended bool
	// passed is the revision of the last deletion the watch reported that
	// matched no tracked lock.
	passed int64
	stop   context.CancelFunc
}

// track registers st, a lock granted on s. The caller holds mu.
func (s *session) track(st *lockState) {
	s.locks[st] = struct{}{}
	k := s.dirs[st.dir]
	if k == nil {
		k = &keyDir{locks: map[string][]*lockState{}}
		s.dirs[st.dir] = k
	}
	k.locks[st.key] = append(k.locks[st.key], st)
	// The watch reports every deletion of st's key after st's creation
	// from now on; those reported before went unmatched.
	st.watched = k.watching && k.from <= st.rev+1 && k.passed <= st.rev
}

// untrack stops tracking st, and the directory's watch with its last lock.
// It reports whether st was tracked. The caller holds mu.
func (s *session) untrack(st *lockState) bool {
	if _, ok := s.locks[st]; !ok {
		return false
	}
	delete(s.locks, st)
	k := s.dirs[st.dir]
	if k == nil {
		return true
	}
	sts := slices.DeleteFunc(k.locks[st.key], func(o *lockState) bool { return o == st })
	if len(sts) == 0 {
		delete(k.locks, st.key)
	} else {
		k.locks[st.key] = sts
	}
	if len(k.locks) == 0 {
		if k.stop != nil {
			k.stop()
		}
		delete(s.dirs, st.dir)
	}
	return true
}

// stopWatches stops every watch of s. The caller holds mu.
func (s *session) stopWatches() {
	for _, k := range s.dirs {
		if k.stop != nil {
			k.stop()
		}
	}
	s.dirs = nil
}

// vouch reports whether a watch reports st's deletion, and starts the
// watch of st's directory when it never had one: from the revision after
// the oldest creation among the session's locks there, which it then
// vouches for too. The caller holds mu.
func (d *etcdDriver) vouch(st *lockState) bool {
	if st.watched {
		return true
	}
	s := st.sess
	k := s.dirs[st.dir]
	if k == nil || k.watching || k.ended {
		return false
	}
	from := st.rev
	for _, sts := range k.locks {
		for _, o := range sts {
			from = min(from, o.rev)
		}
	}
	d.watchDir(s, k, st.dir, from+1)
	for _, sts := range k.locks {
		for _, o := range sts {
			o.watched = true
		}
	}
	return true
}

// confirmed records that a read at revision rev found st's key: the watch
// of its directory vouches for st from then on, restarted from rev+1 if it
// ended. The caller holds mu.
func (d *etcdDriver) confirmed(st *lockState, rev int64) {
	s := st.sess
	k := s.dirs[st.dir]
	if k == nil {
		return
	}
	if !k.watching {
		d.watchDir(s, k, st.dir, rev+1)
	}
	// st was tracked before the read was sent: a deletion after rev is
	// matched to it when the watch reports it.
	st.watched = k.from <= rev+1
}

// watchDir starts the watch of the session's keys in dir from revision
// from. The caller holds mu.
func (d *etcdDriver) watchDir(s *session, k *keyDir, dir string, from int64) {
	if d.closed {
		return
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	k.watching, k.ended, k.from, k.stop = true, false, from, cancel
	d.watchers.Add(1)
	go func() {
		defer d.watchers.Done()
		defer cancel()
		// Watch returns once etcd created the watch: not under mu.
		wch := d.cli.Watch(ctx, dir+s.hex, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithFilterPut())
		for resp := range wch {
			if resp.Canceled || resp.Err() != nil {
				break
			}
			d.deleted(s, k, resp.Events)
		}
		if ctx.Err() != nil {
			return // stopped
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if k.stop != nil && ctx.Err() == nil {
			k.watching, k.ended = false, true
			for _, sts := range k.locks {
				for _, st := range sts {
					st.watched = false
				}
			}
		}
	}()
}

// deleted reports the locks lost to deletions a watch of k saw: a tracked
// lock's key deleted after the lock's creation.
func (d *etcdDriver) deleted(s *session, k *keyDir, evs []*clientv3.Event) {
	var lost []*lockState
	d.mu.Lock()
	for _, ev := range evs {
		if ev.Type != mvccpb.DELETE {
			continue
		}
		rev := ev.Kv.ModRevision
		matched := false
		for _, st := range k.locks[string(ev.Kv.Key)] {
			if st.rev < rev {
				lost = append(lost, st)
				matched = true
			}
		}
		if !matched {
			k.passed = max(k.passed, rev)
		}
	}
	var gone []*lockState
	for _, st := range lost {
		if s.untrack(st) {
			gone = append(gone, st)
		}
	}
	d.mu.Unlock()
	for _, st := range gone {
		st.lost(fmt.Errorf("etcd: key %q deleted", st.key))
	}
}

// dirsOf returns the distinct directories of sts.
func dirsOf(sts []*lockState) []string {
	dirs := map[string]bool{}
	for _, st := range sts {
		dirs[st.dir] = true
	}
	return slices.Sorted(maps.Keys(dirs))
}
