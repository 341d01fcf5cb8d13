// Package slowlink makes a client's connections to one server slow on
// demand: while a delay is set, each write waits that long before it goes
// out, and each read that long after its bytes came in, so that requests
// and replies each arrive that much late, in order on each connection.
// Without a delay a connection costs nothing more than the one it wraps.
// The Redlock conformance harnesses give each Locker one Link per master
// (its go-redis Dialer) for Harness.Slow.
package slowlink

import (
	"context"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// maxDelay bounds every delay: a link is slow, never dead.
const maxDelay = 10 * time.Second

// Link is the connections of one client to one server. Its zero value is
// ready (not slow); its methods are safe for concurrent use.
type Link struct {
	delay atomic.Int64 // nanoseconds
}

// Slow makes every write and read on the Link's connections from now on
// take d (at most 10 s) more, until the returned function is called;
// writes and reads already waiting keep their delay. Calls do not stack:
// the last one rules.
func (l *Link) Slow(d time.Duration) (restore func()) {
	l.delay.Store(int64(min(d, maxDelay)))
	var once sync.Once
	return func() { once.Do(func() { l.delay.Store(0) }) }
}

// Dial dials addr (the address the client asked for is ignored) and
// returns the connection on the Link: a go-redis Options.Dialer.
func (l *Link) Dial(addr string) func(ctx context.Context, network, _ string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &conn{Conn: c, link: l, closed: make(chan struct{})}, nil
	}
}

// conn is a connection on a Link.
type conn struct {
	net.Conn
	link *Link
	// The write deadline the client set, in UnixNano (0: none): a delayed
	// write ends at it as the connection's own would.
	writeBy   atomic.Int64
	closed    chan struct{}
	closeOnce sync.Once
}

// wait sleeps for the Link's delay, up to the deadline by (UnixNano, 0:
// none) or the connection's Close; it reports false when the deadline or
// Close came first.
func (c *conn) wait(by int64) bool {
	d := time.Duration(c.link.delay.Load())
	if d <= 0 {
		return true
	}
	ok := true
	if by != 0 {
		if left := time.Until(time.Unix(0, by)); left < d {
			d, ok = max(left, 0), false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return ok
	case <-c.closed:
		return false
	}
}

func (c *conn) Write(b []byte) (int, error) {
	if !c.wait(c.writeBy.Load()) {
		return 0, os.ErrDeadlineExceeded
	}
	return c.Conn.Write(b)
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.wait(0) // the bytes came: they are passed on late, whatever the deadline
	}
	return n, err
}

func (c *conn) SetDeadline(t time.Time) error {
	c.writeBy.Store(nanos(t))
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.writeBy.Store(nanos(t))
	return c.Conn.SetWriteDeadline(t)
}

func (c *conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
