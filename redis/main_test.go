package redis_test

import (
	"os"
	"testing"

	"github.com/golocker/locker/internal/storeenv"
)

// redisAddr is the address of the test server, for the examples.
var redisAddr = os.Getenv(storeenv.RedisAddr)

// TestMain skips the examples without a server (or fails under CI), and
// checks that no goroutine outlived its test: every Locker and client is
// closed by cleanups.
func TestMain(m *testing.M) { storeenv.Main(m, storeenv.RedisAddr) }
