package redlock_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/integration/internal/redistest"
)

// closer is a go-redis client that can be closed (Crash).
type closer = redistest.Closer

// newClient returns a client of addr closed when the test ends.
func newClient(t testing.TB, addr string) *goredis.Client { return redistest.NewClient(t, addr) }

// clientOptions are the go-redis options of every test client.
func clientOptions(addr string) *goredis.Options { return redistest.ClientOptions(addr) }
