package etcd_test

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
)

// TestOpenFailsWithinDialTimeout: Open of an etcd that cannot be reached
// fails within dial_timeout, not after New's 30 s grant, naming the
// endpoint and, where there is one, the connection's error.
func TestOpenFailsWithinDialTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addr  func(t *testing.T) string
		cause string
	}{
		{"closed port", closedPort, "connection refused"},
		{"blackholed", blackhole, "no answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := tc.addr(t)
			u, err := url.Parse("etcd://" + addr + "?dial_timeout=1s")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			l, err := etcd.Open(t.Context(), u, locker.WithTTL(2*time.Second))
			took := time.Since(start)
			if err == nil {
				_ = l.Close()
				t.Fatalf("Open of %s must fail", tc.name)
			}
			t.Logf("Open failed after %v: %v", took.Round(time.Millisecond), err)
			// Generous: what is checked is that dial_timeout, not the 30 s
			// bound of the first grant, ends the wait.
			if took > 15*time.Second {
				t.Errorf("Open with dial_timeout=1s took %v to fail", took)
			}
			if msg := err.Error(); !strings.Contains(msg, addr) || !strings.Contains(msg, tc.cause) {
				t.Errorf("Open = %v; want an error naming %s and %q", err, addr, tc.cause)
			}
		})
	}
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// blackhole returns the address of a listener that accepts connections and
// never answers, as a stalled server or a half-open firewall does.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}
