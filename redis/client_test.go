package redis

import (
	"context"
	"net"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// clientOptions are the go-redis options of every test client: ctx deadlines
// bound every call (as the package doc recommends), and reads time out well
// within a renewal interval.
func clientOptions(addr string) *goredis.Options {
	return &goredis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		DialTimeout:           time.Second,
		Protocol:              testProtocol,
	}
}

var testProtocol = 3

// newClient returns a client of addr closed when the test ends.
func newClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(clientOptions(addr))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newCluster returns a cluster client, closed when the test ends, whose
// connections to node addr go through dial (nil: directly).
func newCluster(t testing.TB, addrs []string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *goredis.ClusterClient {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{
		Addrs:                 addrs,
		ContextTimeoutEnabled: true,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		DialTimeout:           time.Second,
		Dialer:                dial,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
