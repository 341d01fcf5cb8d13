package zookeeper

import (
	"bufio"
	"net"
	"time"
)

// readBuffer is the size of the read buffer of a connection of a Locker's
// own: a listing of a queue of a hundred lock nodes fits in it.
const readBuffer = 16 << 10

// bufferedConn is a connection to a ZooKeeper server whose reads go through
// a buffer. go-zookeeper reads each packet in two calls, its length and
// then its body, and each call on a bare connection is a system call; with
// the buffer, the first fills it with the whole packet (and any that
// arrived with it) and the second is a copy. Deadlines and writes are the
// connection's own: a read that waits on the connection still ends at its
// deadline.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

// Read reads from the buffer, filling it from the connection when empty.
func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// dialBuffered is the go-zookeeper dialer of a connection of a Locker's
// own: net.DialTimeout (go-zookeeper's default), its reads buffered.
func dialBuffered(network, address string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &bufferedConn{Conn: conn, r: bufio.NewReaderSize(conn, readBuffer)}, nil
}
