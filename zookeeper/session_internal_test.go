package zookeeper

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

// TestGrantedSessionTimeout: the session timeout the server granted is read
// from the connection (go-zookeeper does not export it), and the server's
// answer counts, not the request: the test server grants at least two ticks
// (400 ms).
func TestGrantedSessionTimeout(t *testing.T) {
	srv := storeenv.ZooKeeper(t)
	for asked, want := range map[time.Duration]time.Duration{3 * time.Second: 3 * time.Second, 100 * time.Millisecond: 400 * time.Millisecond} {
		conn, _, err := zk.Connect(srv.Addrs(), asked, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for deadline := time.Now().Add(15 * time.Second); conn.State() != zk.StateHasSession; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no ZooKeeper session after 15 s (state %v)", conn.State())
			}
		}
		got, ok := grantedTimeout(conn)
		if !ok || got != want {
			t.Errorf("asked for %v: granted timeout read as %v (%v), want %v", asked, got, ok, want)
		}
	}
}

// TestNoEventsTakesInTheGrantedTimeout: a Locker made without the
// connection's events, before the connection has a session, counts on its
// locks for the session timeout the server granted when that is shorter
// than the TTL, as one with events does. It counted on the whole TTL: it
// never heard of a session after New.
func TestNoEventsTakesInTheGrantedTimeout(t *testing.T) {
	const (
		ttl    = 10 * time.Second
		asked  = time.Second // the test server grants it (at most 4 s)
		within = 15 * time.Second
	)
	srv := storeenv.ZooKeeper(t)
	// The connection dials once the Locker is made: New sees no session.
	made := make(chan struct{})
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		<-made
		return net.DialTimeout(network, addr, timeout)
	}
	conn, _, err := zk.Connect(srv.Addrs(), asked, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}), zk.WithDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	l, err := New(conn, nil, locker.WithTTL(ttl))
	close(made)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	lk, err := l.TryLock(ctx, "no-events-granted-timeout")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	defer lk.Unlock(ctx)
	granted, ok := grantedTimeout(conn)
	if !ok || granted >= ttl {
		t.Fatalf("granted timeout %v (%v): want one below the TTL %v", granted, ok, ttl)
	}
	if dl := lk.Deadline(); dl.After(after.Add(granted)) {
		t.Errorf("the lock counts on %v from its grant on a session that times out after %v: a Locker without events must take in a session's granted timeout", dl.Sub(after).Round(time.Millisecond), granted)
	}
}
