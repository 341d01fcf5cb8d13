package zookeeper

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/go-zookeeper/zk"
)

// grantedTimeout returns the session timeout the server granted conn in its
// last handshake. go-zookeeper does not export it: this reads its field,
// which it writes before it reports StateHasSession (so reading it after
// seeing that state, or that event, is ordered after the write).
// TestGrantedSessionTimeout fails if the field ever goes away.
func grantedTimeout(conn *zk.Conn) (time.Duration, bool) {
	f := reflect.ValueOf(conn).Elem().FieldByName("sessionTimeoutMs")
	if !f.IsValid() || f.Kind() != reflect.Int32 || f.Int() <= 0 {
		return 0, false
	}
	return time.Duration(f.Int()) * time.Millisecond, true
}

// sessionGranted takes in the timeout of a new session: the validity of the
// locks on it is the TTL, or the granted timeout when that is shorter (the
// server forgets a silent session's nodes after it).
func (d *zkDriver) sessionGranted() {
	granted, ok := grantedTimeout(d.conn)
	if !ok {
		return
	}
	v := min(granted, d.ttl)
	if old := time.Duration(d.validity.Swap(int64(v))); v < d.ttl && old != v {
		d.logger.Warn("locker: zookeeper granted a session timeout shorter than the TTL; locks count on the shorter one",
			"granted", granted, "ttl", d.ttl)
	}
}

// validityNow returns how long a lock on the current session is counted
// on (see validity). A Locker without the connection's events learns here
// of a new session's granted timeout, which watchEvents reports otherwise.
func (d *zkDriver) validityNow() time.Duration {
	if d.events == nil {
		d.noteSession()
	}
	return time.Duration(d.validity.Load())
}

// noteSession takes in the timeout of the connection's session once, when
// it is one the driver has not seen yet.
func (d *zkDriver) noteSession() {
	s := d.conn.SessionID()
	// go-zookeeper writes the session id, then the timeout, then the
	// state: the timeout is read once the state says the session is set
	// up.
	if s == 0 || d.seen.Load() == s || d.conn.State() != zk.StateHasSession {
		return
	}
	if d.seen.Swap(s) != s {
		d.sessionGranted()
	}
}

// ownerOf returns the session that owns the ephemeral node p.
func (d *zkDriver) ownerOf(ctx context.Context, p string) (int64, error) {
	type exists struct {
		ok   bool
		stat *zk.Stat
	}
	r, err := call(ctx, d, func() (exists, error) {
		ok, st, err := d.conn.Exists(p)
		return exists{ok, st}, err
	})
	switch {
	case err != nil:
		return 0, fmt.Errorf("stat %s: %w", p, err)
	case !r.ok:
		return 0, errNodeGone
	}
	return r.stat.EphemeralOwner, nil
}

// fresh reports whether a proof of the session's life sent at since is
// young enough to grant a lock on: younger than a quarter of the validity,
// so that the grant leaves the engine its whole renewal schedule (it renews
// a third of the TTL after since).
func (d *zkDriver) fresh(since time.Time) bool {
	return time.Since(since) < time.Duration(d.validity.Load())/4
}
