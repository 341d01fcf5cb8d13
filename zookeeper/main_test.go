package zookeeper_test

import (
	"testing"

	"github.com/golocker/locker/internal/storeenv"
)

// zkServers are the addresses of the test server, for the examples.
var zkServers = storeenv.List(storeenv.ZooKeeperServers)

// TestMain skips the examples without a server (or fails under CI), and
// checks that no goroutine outlived its test.
func TestMain(m *testing.M) { storeenv.Main(m, storeenv.ZooKeeperServers) }
