// Package slowlink is a loopback TCP proxy that can make one link slow:
// while a delay is set, every chunk of bytes it reads, either way, is
// passed on that long after it was read, in order on each connection.
// The conformance harnesses put one in front of each store node of each
// Locker for Harness.Slow.
package slowlink

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// maxDelay bounds every delay: a link is slow, never dead.
const maxDelay = 10 * time.Second

// held bounds the chunks waiting on one direction of one connection; the
// reader waits (as TCP's window would make the sender wait) beyond it.
const held = 64

// Link is a proxy to one target. Its methods are safe for concurrent use.
type Link struct {
	target string
	ln     net.Listener
	delay  atomic.Int64 // nanoseconds added to each chunk read now
	done   chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// New starts a Link to target (host:port) on a free port of 127.0.0.1; it
// stops when the test ends, closing every connection.
func New(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("slowlink: listen: %v", err)
	}
	l := &Link{target: target, ln: ln, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	l.wg.Go(l.accept)
	t.Cleanup(l.close)
	return l
}

// Addr is the address clients dial instead of the target.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Slow delays by d (at most 10 s) every chunk read from now on, either
// way, until the returned function is called; chunks read before keep
// their delay. Calls do not stack: the last one rules.
func (l *Link) Slow(d time.Duration) (restore func()) {
	l.delay.Store(int64(min(d, maxDelay)))
	var once sync.Once
	return func() { once.Do(func() { l.delay.Store(0) }) }
}

func (l *Link) close() {
	select {
	case <-l.done:
		return
	default:
	}
	close(l.done)
	_ = l.ln.Close()
	l.mu.Lock()
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// track records c to be closed by close; false when the Link is closed.
func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.done:
		_ = c.Close()
		return false
	default:
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	_ = c.Close()
}

func (l *Link) accept() {
	for {
		client, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			case <-time.After(10 * time.Millisecond): // EMFILE and the like
				continue
			}
		}
		if !l.track(client) {
			continue
		}
		l.wg.Go(func() { l.serve(client) })
	}
}

// serve connects client to the target and passes bytes both ways.
func (l *Link) serve(client net.Conn) {
	defer l.untrack(client)
	d := net.Dialer{Timeout: 5 * time.Second}
	server, err := d.Dial("tcp", l.target)
	if err != nil || !l.track(server) {
		return
	}
	defer l.untrack(server)
	var both sync.WaitGroup
	both.Go(func() { l.pipe(server, client) })
	both.Go(func() { l.pipe(client, server) })
	both.Wait()
}

// chunk is bytes read at a time, to be passed on at due.
type chunk struct {
	b   []byte
	due time.Time
	err error // the read's end (io.EOF: pass on as a half-close)
}

// pipe reads src and writes dst. While no delay is set and nothing is
// held, it writes each read at once; otherwise a writer passes each chunk
// on at its due time, in order. Any end closes both connections, but for
// an orderly EOF, passed on as a half-close.
func (l *Link) pipe(dst, src net.Conn) {
	q := make(chan chunk, held)
	var pending atomic.Int32 // chunks in q or being written by the writer
	l.wg.Go(func() { l.write(dst, src, q, &pending) })
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		delay := time.Duration(l.delay.Load())
		if delay == 0 && pending.Load() == 0 {
			// The writer is idle and stays so: only this loop feeds it.
			if !passOn(dst, src, buf[:n], err) {
				return
			}
			continue
		}
		pending.Add(1)
		select {
		case q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay), err: err}:
		case <-l.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// write passes the chunks of q on at their due time.
func (l *Link) write(dst, src net.Conn, q <-chan chunk, pending *atomic.Int32) {
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return
			}
		}
		ok := passOn(dst, src, c.b, c.err)
		pending.Add(-1)
		if !ok {
			return
		}
	}
}

// passOn writes b to dst and passes on the end err of src's read, if any;
// it reports whether the pipe goes on.
func passOn(dst, src net.Conn, b []byte, err error) bool {
	if len(b) > 0 {
		if _, werr := dst.Write(b); werr != nil {
			_, _ = src.Close(), dst.Close()
			return false
		}
	}
	if err == nil {
		return true
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && errors.Is(err, io.EOF) {
		_ = cw.CloseWrite()
		return false
	}
	_, _ = src.Close(), dst.Close()
	return false
}
