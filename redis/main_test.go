package redis_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker/internal/storeenv"
)

// redisAddr is the address of the test server, for the examples.
var redisAddr = os.Getenv(storeenv.RedisAddr)

// exampleRedlockTTL is the TTL of ExampleNewRedlock (keep them equal),
// whose masters (three databases of the test server) grant nothing for that
// long after the server started (RedlockConfig.RestartDelay).
const exampleRedlockTTL = 10 * time.Second

// TestMain skips the examples without a server (or fails under CI), waits
// until the server is old enough for the Redlock example, and checks that
// no goroutine outlived its test: every Locker and client is closed by
// cleanups.
func TestMain(m *testing.M) {
	if redisAddr != "" {
		awaitUptime(redisAddr, exampleRedlockTTL)
	}
	storeenv.Main(m, storeenv.RedisAddr)
}

// awaitUptime waits until the server at addr has been up for d (at most d),
// and returns early when it cannot tell: the tests then report what fails.
func awaitUptime(addr string, d time.Duration) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return
	}
	_, rest, _ := strings.Cut(info, "uptime_in_seconds:")
	line, _, _ := strings.Cut(rest, "\n")
	up, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return
	}
	if left := d - time.Duration(up)*time.Second; left > 0 {
		time.Sleep(left)
	}
}
