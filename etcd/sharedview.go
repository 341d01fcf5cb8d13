package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/driver"
)

// A queued shared request is woken by every deletion in its key's
// directory (Subscribe), and most wake-ups cannot let it in: a release
// lets in the first waiter or few, and the others would read the whole
// queue again for nothing. So a queued request keeps what its last read
// showed ahead of it, and the watch of the same directory strikes out each
// key deleted since. Keys ahead only ever leave (a later key is created
// behind), so what is left is a superset of what is really ahead: while it
// does not fit, the request is refused without a round trip, and once it
// fits, the request is let in, with only the claim of its own key.
//
// The view is kept only while a watch of the directory covers every
// deletion after the read: one created before the read, which had reported
// no deletion past it. It ends with that watch, when the watch reports the
// request's own key deleted, and when the watch of the limit record (which
// Subscribe starts with it) reports a change; the next attempt then reads
// again, as does the first attempt a third of the TTL after the view's
// read (a watch that lags does not hold a request back for longer). The
// claim compares the limit record as the view's read saw it: a change the
// watch has yet to report fails the claim, and the request reads again.
//
// A view learns only from the changes after its read. A watch may report
// a change after a read that already shows it, and a key's name outlives
// its key (a Locker's next request takes its slot's name, sharename.go):
// a deletion before the read may be of an earlier key under the name of a
// key the read shows ahead.

// dirSub is one Subscribe's watches of a key directory and its limit
// record. Fields are guarded by etcdDriver.mu.
type dirSub struct {
	dir     string
	created int64 // the watches report every deletion and limit change after this revision
	seen    int64 // the revision of the last of those they reported
	views   map[string]*queueView
	// chans are the subscribers' channels, each woken on a deletion or a
	// limit change.
	chans map[chan struct{}]struct{}
	// live: new subscribers may join; idle ends the watches once the last
	// subscriber left (Subscribe).
	live bool
	idle *time.Timer
	stop context.CancelFunc
}

// queueView is what a queued shared request knows of the keys ahead of it.
type queueView struct {
	value string                 // the request's key's value: its owner's
	read  time.Time              // when the read it comes from was sent
	at    int64                  // the revision of that read
	rev   int64                  // create revision of the request's key
	ahead map[string]shareRecord // keys ahead, not yet seen deleted
	limit limitRecord            // the limit record as read
	lost  bool                   // its own key was seen deleted, or the limit record changed
}

// fits reports whether s fits behind the keys of v, as fits does.
func (v *queueView) fits(s driver.Share) bool {
	used := s.Weight
	for _, r := range v.ahead {
		if s.Mode == driver.Write || r.mode != s.Mode {
			return false
		}
		used += r.weight
	}
	return s.Mode != driver.Permits || used <= s.Limit
}

// subscribe registers a watch of dir created at revision created. The
// caller holds mu.
func (d *etcdDriver) subscribe(dir string, created int64) *dirSub {
	sub := &dirSub{dir: dir, created: created, views: map[string]*queueView{}, chans: map[chan struct{}]struct{}{}, live: true}
	if d.subs == nil {
		d.subs = map[string]map[*dirSub]struct{}{}
	}
	if d.subs[dir] == nil {
		d.subs[dir] = map[*dirSub]struct{}{}
	}
	d.subs[dir][sub] = struct{}{}
	return sub
}

// unsubscribe drops sub, whose watch ended, and the views it kept.
func (d *etcdDriver) unsubscribe(sub *dirSub) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sub.live = false
	if sub.idle != nil {
		sub.idle.Stop()
		sub.idle = nil
	}
	delete(d.subs[sub.dir], sub)
	if len(d.subs[sub.dir]) == 0 {
		delete(d.subs, sub.dir)
	}
}

// seeDeletions strikes the keys deleted by evs out of the views of sub read
// before the deletions, then wakes its subscribers.
func (d *etcdDriver) seeDeletions(sub *dirSub, evs []*clientv3.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer sub.wake()
	for _, ev := range evs {
		if ev.Type != mvccpb.DELETE {
			continue
		}
		key, rev := string(ev.Kv.Key), ev.Kv.ModRevision
		sub.seen = max(sub.seen, rev)
		if v := sub.views[key]; v != nil && rev > v.rev {
			v.lost = true
		}
		for _, v := range sub.views {
			if rev > v.at {
				delete(v.ahead, key)
			}
		}
	}
}

// seeLimit ends the views of sub read before evs changed the limit record
// of its directory, then wakes its subscribers.
func (d *etcdDriver) seeLimit(sub *dirSub, evs []*clientv3.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ev := range evs {
		rev := ev.Kv.ModRevision
		sub.seen = max(sub.seen, rev)
		for _, v := range sub.views {
			if rev > v.at {
				v.lost = true
			}
		}
	}
	sub.wake()
}

// wake wakes sub's subscribers. The caller holds mu.
func (sub *dirSub) wake() {
	for ch := range sub.chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// keepView records, for the queued request whose key is key, created at
// rev with value, the keys ahead of it and the limit record lr as a read
// at revision at showed them, if the watches of dir cover every change
// since.
func (d *etcdDriver) keepView(dir, key, value string, read time.Time, rev, at int64, ahead []*mvccpb.KeyValue, lr limitRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropViewLocked(dir, key)
	for sub := range d.subs[dir] {
		if sub.created > at || sub.seen > at {
			continue
		}
		v := &queueView{value: value, read: read, at: at, rev: rev, ahead: make(map[string]shareRecord, len(ahead)), limit: lr}
		for _, kv := range ahead {
			r, ok := parseShared(kv.Value)
			if !ok {
				return // a plain lock ahead: no view
			}
			v.ahead[string(kv.Key)] = r
		}
		sub.views[key] = v
		return
	}
}

// view returns the view of the queued request whose key is key, with
// value, nil when none is kept. A key's name outlives its request
// (sharename.go): the value tells whose the view is.
func (d *etcdDriver) view(dir, key, value string) *queueView {
	d.mu.Lock()
	defer d.mu.Unlock()
	for sub := range d.subs[dir] {
		if v := sub.views[key]; v != nil && v.value == value && !v.lost && time.Since(v.read) < d.ttl/3 {
			return v
		}
	}
	return nil
}

// viewFits reports whether the view of key, kept as v, still fits s: it
// reads v under mu.
func (d *etcdDriver) viewFits(v *queueView, s driver.Share) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !v.lost && v.fits(s)
}

// dropView forgets the view of key.
func (d *etcdDriver) dropView(dir, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropViewLocked(dir, key)
}

func (d *etcdDriver) dropViewLocked(dir, key string) {
	for sub := range d.subs[dir] {
		delete(sub.views, key)
	}
}
