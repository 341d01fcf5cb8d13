package testenv

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// proxyMode is what a Proxy does with traffic.
type proxyMode int

const (
	// proxyOpen forwards bytes both ways.
	proxyOpen proxyMode = iota
	// proxyBlackhole holds bytes (and connection ends) until healed.
	proxyBlackhole
	// proxyReset refuses connections.
	proxyReset
)

// proxyDialTimeout bounds the proxy's connection to its target.
const proxyDialTimeout = 5 * time.Second

// Proxy is a loopback TCP proxy in front of one server, for fault injection:
// give one client its own Proxy and cut just that client off while others
// talk to the server directly. Every client connection accepted on [Proxy.Addr]
// gets its own connection to the target.
//
// [Proxy.Cut] models a network partition, [Proxy.Reset] a refused or reset
// connection, [Proxy.Heal] ends either. Its methods are safe for concurrent
// use.
//
// For Redis and ZooKeeper, give the client Proxy.Addr instead of the
// server's address. For MySQL, parse the DSN with mysql.ParseDSN, set its
// Addr to Proxy.Addr and format it again. A Redis Cluster cannot be proxied
// this way: its nodes tell clients their real addresses.
type Proxy struct {
	target string
	ln     net.Listener
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup

	mu     sync.Mutex
	mode   proxyMode
	gate   chan struct{} // closed while mode is proxyOpen
	conns  map[*proxyConn]struct{}
	closed bool

	closeOnce sync.Once
}

// NewProxy starts a proxy to target (host:port) listening on a free port of
// 127.0.0.1. It is closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy listen: %v", err)
	}
	gate := make(chan struct{})
	close(gate)
	p := &Proxy{
		target: target,
		ln:     ln,
		done:   make(chan struct{}),
		gate:   gate,
		conns:  map[*proxyConn]struct{}{},
	}
	p.wg.Go(p.acceptLoop)
	t.Cleanup(p.Close)
	return p
}

// Addr returns the address (127.0.0.1:port) clients dial instead of the
// target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address of the server behind the proxy.
func (p *Proxy) Target() string { return p.target }

// Cut partitions the clients from the server, like a network that silently
// drops packets: connections stay open but no byte, and no close, is passed
// on in either direction; new connections are accepted but not connected to
// the server. Clients see timeouts, not errors; TCP keepalives do not notice
// the cut (the proxy's own sockets still answer them), only the clients'
// read timeouts and the servers' session timeouts do. Held bytes are
// delivered when [Proxy.Heal] is called, as TCP would retransmit them, so
// healed connections carry on where they stopped.
func (p *Proxy) Cut() {
	p.setMode(proxyBlackhole)
}

// Reset closes every current connection with a TCP reset (both the client's
// and the proxy's connection to the server) and, until [Proxy.Heal], resets
// every new connection as soon as it is accepted. Clients see connection
// errors at once. Call Reset then Heal to drop connections just once.
func (p *Proxy) Reset() {
	p.setMode(proxyReset)
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close(true)
	}
}

// Heal ends a [Proxy.Cut] or [Proxy.Reset]: held bytes are delivered and new
// connections are forwarded again.
func (p *Proxy) Heal() {
	p.setMode(proxyOpen)
}

// setMode switches the mode, opening or closing the gate that forwarding
// waits on.
func (p *Proxy) setMode(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.mode == proxyOpen && m != proxyOpen:
		p.gate = make(chan struct{})
	case p.mode != proxyOpen && m == proxyOpen:
		close(p.gate)
	}
	p.mode = m
}

// Close stops the proxy: it closes the listener and every connection, and
// returns once all of the proxy's goroutines have exited. It is safe to call
// more than once.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		conns := make([]*proxyConn, 0, len(p.conns))
		for c := range p.conns {
			conns = append(conns, c)
		}
		p.mu.Unlock()

		close(p.done)
		_ = p.ln.Close()
		for _, c := range conns {
			c.close(false)
		}
		p.wg.Wait()
	})
}

// acceptLoop accepts client connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Temporary accept errors (EMFILE, ...): back off a little.
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		if p.closed || p.mode == proxyReset {
			p.mu.Unlock()
			resetConn(client)
			continue
		}
		c := &proxyConn{client: client, done: make(chan struct{})}
		p.conns[c] = struct{}{}
		p.wg.Add(1) // under mu: Close cannot be waiting yet
		p.mu.Unlock()
		go p.serve(c)
	}
}

// waitOpen blocks while the proxy is cut or reset; it reports false when c
// or the proxy is closed meanwhile.
func (p *Proxy) waitOpen(c *proxyConn) bool {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	select {
	case <-gate:
		return true
	case <-c.done:
		return false
	case <-p.done:
		return false
	}
}

// serve connects c to the target and forwards bytes until both directions
// end.
func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.close(false)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()

	if !p.waitOpen(c) { // a connection made during a cut waits for the heal
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), proxyDialTimeout)
	stopWatch := closeCancels(c.done, cancel) // Close must not wait for a slow dial
	var d net.Dialer
	server, err := d.DialContext(ctx, "tcp", p.target)
	stopWatch()
	cancel()
	if err != nil {
		return
	}
	if !c.setServer(server) {
		return
	}

	var inner sync.WaitGroup
	inner.Go(func() { p.pipe(c, server, c.client) })
	inner.Go(func() { p.pipe(c, c.client, server) })
	inner.Wait()
}

// closeCancels calls cancel when done is closed, until the returned stop
// function is called; stop waits for the watcher to exit.
func closeCancels(done <-chan struct{}, cancel context.CancelFunc) (stop func()) {
	quit := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-done:
			cancel()
		case <-quit:
		}
	}()
	return func() {
		close(quit)
		<-exited
	}
}

// pipe copies src to dst, holding each chunk (and the end of the stream)
// while the proxy is not open. An orderly end (EOF) is passed on as a
// half-close; any other error closes the whole connection.
func (p *Proxy) pipe(c *proxyConn, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.waitOpen(c) {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				c.close(false)
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
					return
				}
			}
			c.close(false)
			return
		}
	}
}

// proxyConn is one client connection and the proxy's connection to the
// target for it.
type proxyConn struct {
	client net.Conn
	done   chan struct{} // closed by close

	mu     sync.Mutex
	server net.Conn // nil until dialled
	closed bool
}

// setServer records the connection to the target; it reports false (and
// closes server) when c was closed meanwhile.
func (c *proxyConn) setServer(server net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = server.Close()
		return false
	}
	c.server = server
	return true
}

// close closes both connections, with a TCP reset when reset is true, and
// wakes the goroutines waiting on c.
func (c *proxyConn) close(reset bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	server := c.server
	close(c.done)
	c.mu.Unlock()

	if reset {
		resetConn(c.client)
		if server != nil {
			resetConn(server)
		}
		return
	}
	_ = c.client.Close()
	if server != nil {
		_ = server.Close()
	}
}

// resetConn closes conn with a TCP RST instead of a FIN.
func resetConn(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
