package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
	"github.com/golocker/locker/internal/storeenv"
)

// TestHolderSeesItsNodeDeleted: a holder whose node is deleted behind its
// back learns it from a watch, without waiting for a renewal (the driver
// runs none by itself), and its own Release or Keep reports no loss.
func TestHolderSeesItsNodeDeleted(t *testing.T) {
	srv := storeenv.ZooKeeper(t)
	d, ctx := holdWatchDriver(t, srv, nil)
	admin := holdWatchConn(t, srv, nil)
	acquire := func(key string) (driver.Lease, <-chan error) {
		lost := make(chan error, 10)
		g, err := d.TryAcquire(ctx, driver.Request{Key: key, Lost: func(err error) { lost <- err }})
		if err != nil {
			t.Fatal(err)
		}
		return driver.Lease{Key: key, State: g.State}, lost
	}

	l, lost := acquire("deleted")
	if err := admin.Delete(l.State.(*hold).path, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, errNodeGone) {
			t.Errorf("Lost(%v); want a cause matching errNodeGone", err)
		}
	case <-ctx.Done():
		t.Fatal("the holder of a lock whose node was deleted behind its back was never told (Request.Lost)")
	}

	// The holder's own release and keep are no loss.
	l, lost = acquire("released")
	if err := d.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	k, klost := acquire("kept")
	if err := d.Keep(ctx, k, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for ok, _, err := admin.Exists(k.State.(*hold).path); ok; ok, _, err = admin.Exists(k.State.(*hold).path) {
		if err != nil || ctx.Err() != nil {
			t.Fatalf("the kept node is still there: %v, %v", err, ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A later loss is reported after the earlier events were: a third
	// lock, deleted, tells when the watches had their turn.
	l3, lost3 := acquire("marker")
	if err := admin.Delete(l3.State.(*hold).path, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost3:
	case <-ctx.Done():
		t.Fatal("the holder of a lock whose node was deleted behind its back was never told (Request.Lost)")
	}
	select {
	case err := <-lost:
		t.Errorf("a Release reported a loss: %v", err)
	case err := <-klost:
		t.Errorf("a Keep reported a loss: %v", err)
	default:
	}
}

// holdWatchDriver returns a driver with a TTL of 3 s on a connection of
// its own (see holdWatchConn), and a context that ends with the test or
// after 30 s.
func holdWatchDriver(t *testing.T, srv *storeenv.Server, dial zk.Dialer) (*zkDriver, context.Context) {
	t.Helper()
	conn := holdWatchConn(t, srv, dial)
	d := newDriver(conn, nil, "/locker-holdwatch-"+rand.Text()[:10], Config{}.nodeACL())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	if err := d.Configure(ctx, driver.Config{TTL: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, ctx
}

// holdWatchConn returns a connection to srv that dials with dial (the
// default dialer when nil), closed when the test ends.
func holdWatchConn(t *testing.T, srv *storeenv.Server, dial zk.Dialer) *zk.Conn {
	t.Helper()
	if dial == nil {
		dial = net.DialTimeout
	}
	conn, _, err := zk.Connect(srv.Addrs(), 3*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}), zk.WithDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// TestSlowReleaseSetsNoHoldWatch: a Release whose Delete is still on its
// way when the hold watch's delay ends sends no watch of the node it is
// deleting (it would cost the server a request, and the holder a goroutine,
// for a deletion the holder makes itself).
func TestSlowReleaseSetsNoHoldWatch(t *testing.T) {
	srv := storeenv.ZooKeeper(t)
	var slow atomic.Bool
	var watches atomic.Int32
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &opConn{Conn: c, slow: &slow, gets: &watches}, nil
	}
	d, ctx := holdWatchDriver(t, srv, dial)
	// A hold that lasts longer than holdWatchDelay before its Release
	// begins is watched, rightly: try until one does not (a loaded
	// machine may pause between the two calls).
	for attempt := 0; ; attempt++ {
		g, err := d.TryAcquire(ctx, driver.Request{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now()
		slow.Store(true)
		watches.Store(0)
		early := time.Since(granted) < holdWatchDelay/2
		if err := d.Release(ctx, driver.Lease{Key: "k", State: g.State}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * holdWatchDelay) // a watch sent late is counted too
		slow.Store(false)
		switch n := watches.Load(); {
		case !early && attempt < 20:
			continue
		case !early:
			t.Fatalf("no Release of 20 began within %v of its grant", holdWatchDelay/2)
		case n > 0:
			t.Fatalf("a Release whose Delete took longer than %v sent %d watch(es) of the node it was deleting", holdWatchDelay, n)
		}
		return
	}
}

// opConn is a client connection that, while slow is set, holds each
// delete request for 3×holdWatchDelay and counts the getData requests
// (watches) it sends in gets.
type opConn struct {
	net.Conn
	slow *atomic.Bool
	gets *atomic.Int32
}

func (c *opConn) Write(b []byte) (int, error) {
	// go-zookeeper writes each request whole: length, xid, opcode, body.
	if c.slow.Load() && len(b) >= 12 {
		switch binary.BigEndian.Uint32(b[8:12]) {
		case 2: // delete
			time.Sleep(3 * holdWatchDelay)
		case 4: // getData
			c.gets.Add(1)
		}
	}
	return c.Conn.Write(b)
}
