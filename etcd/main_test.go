package etcd_test

import (
	"testing"

	"github.com/golocker/locker/internal/storeenv"
)

// TestMain skips the examples without a server (or fails under CI), and
// checks that no goroutine outlived its test.
func TestMain(m *testing.M) { storeenv.Main(m, storeenv.EtcdEndpoints) }
