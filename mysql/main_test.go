package mysql_test

import (
	"testing"

	"github.com/golocker/locker/internal/testenv"
)

// exampleDSN is the DSN of the shared test database, for the examples.
var exampleDSN string

// TestMain provides the examples' server (without one they are skipped, or
// fail under CI), stops the shared servers after the run and checks that no
// goroutine outlived its test.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() error {
		srv, err := testenv.SharedMySQL()
		if err == nil {
			exampleDSN = srv.DSN()
		}
		return err
	}, nil)
}
