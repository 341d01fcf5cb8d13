package zookeeper_test

import (
	"testing"

	"github.com/golocker/locker/internal/testenv"
)

// zkServers are the addresses of the shared test server, for the examples.
var zkServers []string

// TestMain provides the examples' server (without one they are skipped, or
// fail under CI), stops the shared servers after the run and checks that no
// goroutine outlived its test.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() error {
		srv, err := testenv.SharedZooKeeper()
		if err == nil {
			zkServers = srv.Servers()
		}
		return err
	}, nil)
}
