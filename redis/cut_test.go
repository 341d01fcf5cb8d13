package redis

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// lateNet wraps the connections of a test client: while armed, the first
// write that carries marker is held back, as by a slow network, and
// reaches the server only when the test sends it, even after the client
// closed the connection.
type lateNet struct {
	marker []byte
	mu     sync.Mutex
	armed  bool
	held   chan *lateConn // the connection of the write held back
}

func (n *lateNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lateConn{Conn: c, n: n, closed: make(chan struct{})}, nil
}

// lateConn is a connection of lateNet.
type lateConn struct {
	net.Conn
	n       *lateNet
	mu      sync.Mutex
	holding []byte // the request held back; nil when none
	closed  chan struct{}
	once    sync.Once
}

func (c *lateConn) Write(b []byte) (int, error) {
	c.n.mu.Lock()
	hold := c.n.armed && bytes.Contains(b, c.n.marker)
	if hold {
		c.n.armed = false
	}
	c.n.mu.Unlock()
	if !hold {
		return c.Conn.Write(b)
	}
	c.mu.Lock()
	c.holding = bytes.Clone(b)
	c.mu.Unlock()
	c.n.held <- c
	return len(b), nil
}

func (c *lateConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	holding := c.holding != nil
	c.mu.Unlock()
	if holding {
		<-c.closed
		return 0, net.ErrClosed
	}
	return c.Conn.Read(b)
}

// Close closes the connection, but for one whose request is held back:
// the client's side closes, and the request still reaches the server
// (deliver).
func (c *lateConn) Close() error {
	c.mu.Lock()
	holding := c.holding != nil
	c.mu.Unlock()
	if holding {
		c.once.Do(func() { close(c.closed) })
		return nil
	}
	return c.Conn.Close()
}

// deliver sends the request held back and returns the start of the
// server's reply.
func (c *lateConn) deliver(t *testing.T) string {
	t.Helper()
	defer c.Conn.Close()
	if _, err := c.Conn.Write(c.holding); err != nil {
		t.Fatalf("send the held request: %v", err)
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var reply []byte
	buf := make([]byte, 256)
	for !strings.HasSuffix(string(reply), "\r\n") || bytes.Count(reply, []byte("\r\n")) < 3 && reply[0] == '*' {
		n, err := c.Conn.Read(buf)
		reply = append(reply, buf[:n]...)
		if err != nil {
			t.Fatalf("read the held request's reply (so far %q): %v", reply, err)
		}
	}
	return string(reply)
}

// TestCutAttemptRunsAfterItsCleanup: an attempt of a Locker that owns its
// client (Open) is cut when its ctx ends, and its request reaches Redis
// only after the engine cleaned up for it. The request must then take
// nothing and queue nothing: the cleanup's tombstone stops it. The same
// holds for an attempt with context.Background() that Close cuts (the
// "Close/" cases): its ctx ends only then. The "OwnClient/" cases make
// the Locker with Config.OwnClient on a caller's client whose dialer holds
// the request back: the Locker's own client must dial with it, and cut.
func TestCutAttemptRunsAfterItsCleanup(t *testing.T) {
	srv := storeenv.Redis(t)
	plain := newClient(t, srv.Addr())
	type attempt func(ctx context.Context, l locker.Locker, key string) error
	for _, tc := range []struct {
		name    string
		holder  bool   // another Locker holds the key: the attempt queues
		reply   string // the start of the late request's reply
		attempt attempt
	}{
		{"TryLock", false, ":0\r\n", func(ctx context.Context, l locker.Locker, key string) error {
			_, err := l.TryLock(ctx, key)
			return err
		}},
		{"Lock", true, ":0\r\n", func(ctx context.Context, l locker.Locker, key string) error {
			_, err := l.Lock(ctx, key)
			return err
		}},
		{"Semaphore", false, "*3\r\n$4\r\nheld\r\n", func(ctx context.Context, l locker.Locker, key string) error {
			sem, err := locker.NewSemaphore(l, key, 1)
			if err != nil {
				return err
			}
			_, err = sem.TryAcquire(ctx)
			return err
		}},
		{"LockMulti", false, "*3\r\n$4\r\nheld\r\n", func(ctx context.Context, l locker.Locker, key string) error {
			_, err := locker.TryLockMulti(ctx, l, []string{key, key + "-b"})
			return err
		}},
	} {
		for _, kind := range []struct{ byClose, own bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			byClose := kind.byClose
			name := tc.name
			if byClose {
				name = "Close/" + name
			}
			if kind.own {
				name = "OwnClient/" + name
			}
			t.Run(name, func(t *testing.T) {
				ctx := ctxFor(t, 30*time.Second)
				key := uniqueKey(t)
				ln := &lateNet{marker: []byte("{" + key + "}"), held: make(chan *lateConn, 1)}
				o := clientOptions(srv.Addr())
				o.Dialer = ln.dial
				var l locker.Locker
				var err error
				if kind.own {
					c := goredis.NewClient(o)
					t.Cleanup(func() { _ = c.Close() })
					l, err = Config{OwnClient: true}.New(c, locker.WithTTL(10*time.Second))
				} else {
					oc := newOwnedClient(o)
					t.Cleanup(func() { _ = oc.Close() })
					l, err = Config{}.New(oc, locker.WithTTL(10*time.Second))
					if !newDriver(oc).Info().PromptCancel {
						t.Fatal("a Locker on an owned client must promise PromptCancel")
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				// Load the scripts, on another key.
				warm := "warm-" + key
				if err := tc.attempt(ctx, l, warm); err != nil {
					t.Fatalf("warm-up attempt: %v", err)
				}
				other, _ := newTestLocker(t, newClient(t, srv.Addr()), locker.WithTTL(10*time.Second))
				if tc.holder {
					lk, err := other.TryLock(ctx, key)
					if err != nil {
						t.Fatal(err)
					}
					defer func() { _ = lk.Unlock(ctx) }()
				}

				ln.mu.Lock()
				ln.armed = true
				ln.mu.Unlock()
				actx, cancel := context.WithCancel(ctx)
				if byClose {
					actx = context.Background()
				}
				errc := make(chan error, 1)
				go func() { errc <- tc.attempt(actx, l, key) }()
				var held *lateConn
				select {
				case held = <-ln.held:
				case <-ctx.Done():
					t.Fatal("the attempt sent no request")
				}
				if byClose {
					_ = l.Close() // it waits for the attempt, and cleans up after it
					if err := <-errc; !errors.Is(err, locker.ErrClosed) {
						t.Fatalf("an attempt cut by Close must fail with ErrClosed, got %v", err)
					}
				} else {
					cancel()
					if err := <-errc; !errors.Is(err, locker.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
						t.Fatalf("a cut attempt must fail with ErrNotAcquired and ctx.Err(), got %v", err)
					}
				}
				cancel()
				// The engine cleans up in the background: wait for the
				// tombstone, a shared attempt's in the holds hash.
				k := KeysOf(key)
				for {
					names, err := plain.Keys(ctx, "locker:{"+key+"}:cut:*").Result()
					if err != nil {
						t.Fatal(err)
					}
					if len(names) > 0 || plain.HExists(ctx, k.Holders, " cut").Val() {
						break
					}
					select {
					case <-ctx.Done():
						t.Fatal("the cut attempt was never cleaned up")
					case <-time.After(5 * time.Millisecond):
					}
				}
				if got := held.deliver(t); !strings.HasPrefix(got, tc.reply) {
					t.Fatalf("a request that runs after its cleanup must take nothing: reply %q, want %q", got, tc.reply)
				}
				names := []string{k.Lock, k.Queue, k.SharedQueue}
				if tc.name == "LockMulti" {
					names = append(names, lockKey(key+"-b"))
				}
				n, err := plain.Exists(ctx, names...).Result()
				if err != nil {
					t.Fatal(err)
				}
				if tc.holder {
					n-- // the holder's lock
				}
				if n != 0 {
					t.Fatalf("a request that runs after its cleanup must leave nothing: %d of lock, queue, line exist", n)
				}
				// The holds hash keeps the tombstone alone, if any.
				if f := plain.HKeys(ctx, k.Holders).Val(); len(f) > 1 || len(f) == 1 && f[0] != " cut" {
					t.Fatalf("a request that runs after its cleanup must leave no holder: the holds hash has fields %q", f)
				}
				if st, err := locker.Inspect(ctx, other, key); !tc.holder && (err != nil || st.Held || len(st.Holders) != 0) {
					t.Fatalf("Inspect after the cut attempt's cleanup: %+v, %v; want the key free", st, err)
				}
			})
		}
	}
}

// slotInUse takes a slot of a new owned client for a call whose ctx
// cancel ends, and makes a round trip on it.
func slotInUse(t *testing.T) (*ownedClient, *cutSlot, context.CancelFunc) {
	t.Helper()
	c := newOwnedClient(&goredis.Options{Addr: storeenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	s := c.take(ctx)
	if err := s.client.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return c, s, cancel
}

// TestLateCutSparesTheNextCall: a cut whose AfterFunc starts as its call
// ends, and runs after the call's release, must not cut the slot, which then
// serves another call: the next call's dial was refused ("the call's
// connection was cut when its ctx ended"), and a TryLock on a free key
// failed in a CI run.
func TestLateCutSparesTheNextCall(t *testing.T) {
	c, s, cancel := slotInUse(t)
	// The order the race makes: the call ends, then its cut runs.
	c.release(s, nil)
	s.cutNow()
	cancel()
	next := c.take(t.Context())
	if next != s {
		t.Fatal("the slot of the ended call was not reused")
	}
	err := next.client.Ping(t.Context()).Err()
	c.release(next, err)
	if err != nil {
		t.Fatalf("a call on a slot whose last call ended before its cut ran: %v", err)
	}
}

// TestStartedCutSparesTheNextCall: a cut that started as its call ended,
// but looked at the slot only after the call's release, must not find
// the slot armed for the next call: a slot whose cut started is not
// reused.
func TestStartedCutSparesTheNextCall(t *testing.T) {
	c, s, cancel := slotInUse(t)
	started, resume := make(chan struct{}), make(chan struct{})
	s.cutting = func() {
		close(started)
		<-resume
	}
	cancel()
	<-started
	c.release(s, nil)
	next := c.take(t.Context())
	close(resume)
	err := next.client.Ping(t.Context()).Err()
	c.release(next, err)
	if next == s {
		t.Fatal("the slot of a call whose cut had started served the next call, which the cut could then cut")
	}
	if err != nil {
		t.Fatalf("a call after a cut that started late: %v", err)
	}
}

// TestCutReachesThePipelinesConnection: a slot that has run a pipeline and
// then a script cuts the connection of its next pipeline. go-redis gives
// pipelines a pool of their own, whose connection the slot did not know:
// the cut closed the script's, and a blocked pipeline went on waiting (a
// cancelled Inspect of an Open Locker waited for the read timeout; here
// go-redis gave up after 5 s, where a cut returns at once).
func TestCutReachesThePipelinesConnection(t *testing.T) {
	c := newOwnedClient(&goredis.Options{Addr: storeenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pipe := c.Pipeline()
	pipe.Ping(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Eval(ctx, "return 1", nil).Err(); err != nil {
		t.Fatal(err)
	}
	returned := make(chan error, 1)
	go func() {
		pipe := c.Pipeline()
		pipe.BLPop(ctx, 0, "cut-pipeline-"+rand.Text()) // blocks until cut
		_, err := pipe.Exec(ctx)
		returned <- err
	}()
	time.Sleep(100 * time.Millisecond) // the pipeline waits for its reply
	cancel()
	cancelled := time.Now()
	select {
	case err := <-returned:
		t.Logf("the cut pipeline returned %v after the cancel: %v", time.Since(cancelled), err)
		if err == nil {
			t.Fatal("a cut pipeline succeeded")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a pipeline whose ctx ended was not cut within 2 s (a cut returns at once): the cut closed another connection of its slot")
	}
}

// capturedLog is a go-redis logger that records what go-redis would print.
type capturedLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *capturedLog) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, fmt.Sprintf(format, v...))
}

// TestCutSlotsPrintNothing: calls cut as their ctx ends, at every moment of
// their dial and their round trip, make go-redis log nothing. A slot whose
// call was cut while go-redis dialled refused the dial, and go-redis
// printed "failed to dial … cut" to stderr: a library must not write there.
// (Not parallel: go-redis's logger is global, and the test sets it.)
func TestCutSlotsPrintNothing(t *testing.T) {
	logs := &capturedLog{}
	goredis.SetLogger(logs)
	defer logging.Enable() // go-redis's default
	c := newOwnedClient(&goredis.Options{Addr: storeenv.Redis(t).Addr(), ContextTimeoutEnabled: true})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				// Deadlines from 0 to 400 µs: some end before the
				// dial, some during it, some during the round trip.
				ctx, cancel := context.WithTimeout(t.Context(), time.Duration((i*7+g*13)%400)*time.Microsecond)
				_ = c.Eval(ctx, "return 1", nil).Err()
				cancel()
			}
		}()
	}
	wg.Wait()
	_ = c.Close()
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if n := len(logs.msgs); n > 0 {
		t.Errorf("cut calls made go-redis log %d lines (to stderr by default), the first: %q", n, logs.msgs[0])
	}
}
