package zookeeper_test

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/internal/testenv"
)

// opCounter counts the requests its connections send to ZooKeeper, by
// kind: the request's operation ("create", "getChildren2", "getData",
// "ping", ...), a multi-operation as "multi(" and its operations' names
// ")". A getData of a lock node the connection created itself (a holder
// watching its own node) is "getData(own)". It reads the client's side of
// the connection (a dialer for zk.WithDialer wraps the real one), so it
// counts what a client sends whatever else the server is doing.
type opCounter struct {
	// before, when not nil, is called with each request's kind before the
	// request is sent. It runs in go-zookeeper's send loop: the
	// connection sends nothing else until it returns. Set it before dial.
	before func(kind string)

	mu sync.Mutex
	n  map[string]int64
}

// dial is a zk.Dialer that counts the requests sent on its connections.
func (c *opCounter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: c}, nil
}

// countedConn connects to srv with the test session timeout through c's
// dialer, waits for the session, and closes the connection when the test
// ends.
func countedConn(tb testing.TB, srv *testenv.ZooKeeperServer, c *opCounter) (*zk.Conn, <-chan zk.Event) {
	tb.Helper()
	conn, events, err := zk.Connect(srv.Servers(), testTTL, zk.WithLogger(quietLogger{}), zk.WithLogInfo(false), zk.WithDialer(c.dial))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(conn.Close)
	waitSession(tb, conn)
	return conn, events
}

// take returns the counts since the last take, and starts again from zero.
func (c *opCounter) take() opCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = nil
	return opCounts(n)
}

func (c *opCounter) add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[kind]++
}

// opCounts are request counts by kind.
type opCounts map[string]int64

// total is the number of requests.
func (o opCounts) total() int64 {
	var n int64
	for _, v := range o {
		n += v
	}
	return n
}

// per formats the counts divided by n, kinds in order.
func (o opCounts) per(n int) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(o)) {
		fmt.Fprintf(&b, "%s %.2f, ", k, float64(o[k])/float64(n))
	}
	fmt.Fprintf(&b, "total %.2f", float64(o.total())/float64(n))
	return b.String()
}

// countingConn is a client connection that parses the frames it writes
// (go-zookeeper writes them from one goroutine at a time).
type countingConn struct {
	net.Conn
	c         *opCounter
	buf       []byte
	handshake bool                // the connect request, the first frame, was seen
	guids     map[string]struct{} // of the lock nodes this connection created
}

func (cc *countingConn) Write(b []byte) (int, error) {
	cc.buf = append(cc.buf, b...)
	for len(cc.buf) >= 4 {
		size := int(binary.BigEndian.Uint32(cc.buf))
		if len(cc.buf) < 4+size {
			break
		}
		frame := cc.buf[4 : 4+size]
		if cc.handshake {
			kind := cc.kind(frame)
			if cc.c.before != nil {
				cc.c.before(kind)
			}
			cc.c.add(kind)
		}
		cc.handshake = true
		cc.buf = cc.buf[4+size:]
	}
	return cc.Conn.Write(b)
}

// kind names the request in frame: a header (xid, opcode) and its body.
func (cc *countingConn) kind(frame []byte) string {
	if len(frame) < 8 {
		return "short"
	}
	op := int32(binary.BigEndian.Uint32(frame[4:8]))
	r := reader(frame[8:])
	switch op {
	case 1, 15, 19, 21:
		cc.created(r.string())
	case 4:
		if _, own := cc.guids[lockGUID(r.string())]; own {
			return "getData(own)"
		}
	case 14:
		return "multi(" + strings.Join(cc.multiOps(r), ",") + ")"
	}
	return opName(op)
}

// created records the GUID of a lock node created at path p.
func (cc *countingConn) created(p string) {
	if g := lockGUID(p); g != "" {
		if cc.guids == nil {
			cc.guids = map[string]struct{}{}
		}
		cc.guids[g] = struct{}{}
	}
}

// lockGUID is the GUID in the name of the lock node at p, "" when p is no
// lock node (named _c_<guid>-... by this library and by zk.Lock alike).
func lockGUID(p string) string {
	name := path.Base(p)
	if !strings.HasPrefix(name, "_c_") || len(name) < 3+32 {
		return ""
	}
	return name[3 : 3+32]
}

// multiOps names the operations of a multi-operation's body.
func (cc *countingConn) multiOps(r reader) []string {
	var ops []string
	for {
		typ, ok := r.int32()
		if !ok || typ == -1 {
			return ops
		}
		r.skip(1 + 4) // done, err
		ops = append(ops, opName(typ))
		var body bool
		switch typ {
		case 1, 15, 19, 21: // path, data, ACLs, flags (and a TTL)
			p := r.string()
			cc.created(p)
			body = p != "" && r.str() && r.acls() && r.skip(4)
			if typ == 21 {
				body = body && r.skip(8)
			}
		case 5: // path, data, version
			body = r.str() && r.str() && r.skip(4)
		case 2, 13: // path, version
			body = r.str() && r.skip(4)
		}
		if !body {
			return append(ops, "?")
		}
	}
}

// opNames are the names of ZooKeeper's request types, by opcode.
var opNames = map[int32]string{
	1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData", 8: "getChildren",
	9: "sync", 11: "ping", 12: "getChildren2", 13: "check", 14: "multi", 15: "create2",
	19: "createContainer", 21: "createTTL", -11: "close", 100: "setAuth", 101: "setWatches",
}

func opName(op int32) string {
	if s, ok := opNames[op]; ok {
		return s
	}
	return fmt.Sprintf("op%d", op)
}

// reader reads jute-encoded values.
type reader []byte

func (r *reader) skip(n int) bool {
	if n < 0 || len(*r) < n {
		*r = nil
		return false
	}
	*r = (*r)[n:]
	return true
}

func (r *reader) int32() (int32, bool) {
	if len(*r) < 4 {
		return 0, false
	}
	v := int32(binary.BigEndian.Uint32(*r))
	*r = (*r)[4:]
	return v, true
}

// string reads a string, "" when there is none.
func (r *reader) string() string {
	n, ok := r.int32()
	if !ok || n < 0 || int(n) > len(*r) {
		return ""
	}
	v := string((*r)[:n])
	*r = (*r)[n:]
	return v
}

// str skips a string or a buffer (a length, -1 for none, and the bytes).
func (r *reader) str() bool {
	n, ok := r.int32()
	return ok && (n < 0 || r.skip(int(n)))
}

// acls skips a vector of ACLs (perms, scheme, id).
func (r *reader) acls() bool {
	n, ok := r.int32()
	for i := int32(0); ok && i < n; i++ {
		ok = r.skip(4) && r.str() && r.str()
	}
	return ok
}
