package mysql_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/golocker/locker/internal/testenv"
)

// exampleDSN is the DSN of the shared test database, for the examples.
var exampleDSN string

// TestMain provides the examples' server (examples cannot skip themselves:
// without a server they are skipped here, or fail under CI), stops the shared
// servers after the run, and then checks that no goroutine outlived its test:
// every Locker, database handle and proxy is closed by cleanups.
func TestMain(m *testing.M) {
	flag.Parse()
	srv, err := testenv.SharedMySQL()
	if skip := testenv.ExamplesUnavailable(err); skip != "" {
		_ = flag.Set("test.skip", skip)
	} else {
		exampleDSN = srv.DSN()
	}
	code := m.Run()
	testenv.Shutdown()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
