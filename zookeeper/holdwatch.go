package zookeeper

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// holdWatchDelay is how long a hold lasts before its holder watches its
// node: most holds of a busy key end sooner, and so cost the server no
// request for the watch.
const holdWatchDelay = 10 * time.Millisecond

// follow makes h's node watched from holdWatchDelay on (see followHold),
// unless h ends sooner: a timer, which the end of h stops, starts the
// watch's goroutine.
func (d *zkDriver) follow(h *hold) {
	d.wg.Add(1)
	h.followers = &d.wg
	h.follower = time.AfterFunc(holdWatchDelay, func() { d.followHold(h) })
}

// followHold watches the holder's node of h until the hold ends, so that a
// node deleted behind the holder's back (or a session that ended) is
// reported lost when ZooKeeper's event arrives (or, for a deletion before
// the watch was set, when it is set), not at the next renewal round. Its
// own Release and Keep are no loss: Release marks the hold first, and Keep
// ends it. A watch that cannot be set leaves the news to the renewals.
func (d *zkDriver) followHold(h *hold) {
	defer d.wg.Done()
	select {
	case <-h.done: // ended as the timer fired
		return
	case <-d.stop:
		return
	default:
	}
	for {
		set := start(d, func() (<-chan zk.Event, error) {
			_, _, ch, err := d.conn.GetW(h.path)
			return ch, err
		})
		var events <-chan zk.Event
		select {
		case r := <-set:
			switch {
			case errors.Is(r.err, zk.ErrNoNode):
				d.nodeGone(h)
				return
			case r.err != nil:
				d.logger.Debug("locker: zookeeper cannot watch a held lock's node; renewals will tell", "node", h.path, "err", r.err)
				return
			}
			events = r.v
		case <-h.done:
			return
		case <-d.stop:
			return
		}
		select {
		case ev := <-events:
			switch {
			case ev.Type == zk.EventNodeDeleted:
				d.nodeGone(h)
				return
			case ev.Err != nil: // zk.EventNotWatching: the session ended
				d.lose(h, fmt.Errorf("session %#x: %w", h.session, ev.Err))
				return
			}
			// The node's data changed: watch it again.
		case <-h.done:
			return
		case <-d.stop:
			return
		}
	}
}

// nodeGone reports h lost because its node is gone, unless its own Release
// deleted it.
func (d *zkDriver) nodeGone(h *hold) {
	if !h.releasing.Load() {
		d.lose(h, fmt.Errorf("%s: %w", h.path, errNodeGone))
	}
}

// lose ends h and reports it lost with cause, unless it ended already.
func (d *zkDriver) lose(h *hold, cause error) {
	d.loseWhere(func(o *hold) bool { return o == h }, cause)
}
