package redis_test

import (
	"context"
	"net"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/integration/internal/redistest"
)

// clientOptions are the go-redis options of every test client.
func clientOptions(addr string) *goredis.Options { return redistest.ClientOptions(addr) }

// newClient returns a client of addr closed when the test ends.
func newClient(t testing.TB, addr string) *goredis.Client { return redistest.NewClient(t, addr) }

// newCluster returns a cluster client, closed when the test ends, whose
// connections to node addr go through dial (nil: directly).
func newCluster(t testing.TB, addrs []string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *goredis.ClusterClient {
	return redistest.NewCluster(t, addrs, dial)
}
