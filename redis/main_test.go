package redis_test

import (
	"testing"

	"github.com/golocker/locker/internal/testenv"
)

// redisAddr is the address of the shared test server, for the examples.
var redisAddr string

// TestMain provides the examples' server (without one they are skipped, or
// fail under CI), stops the shared servers after the run and checks that no
// goroutine outlived its test: every Locker, client and proxy is closed by
// cleanups.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() error {
		srv, err := testenv.SharedRedis()
		if err == nil {
			redisAddr = srv.Addr()
		}
		return err
	}, nil)
}
