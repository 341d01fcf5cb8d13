package mysql_test

import (
	"os"
	"testing"

	"github.com/golocker/locker/internal/storeenv"
)

// exampleDSN is the DSN of the test database, for the examples.
var exampleDSN = os.Getenv(storeenv.MySQLDSN)

// TestMain skips the examples without a server (or fails under CI), and
// checks that no goroutine outlived its test.
func TestMain(m *testing.M) { storeenv.Main(m, storeenv.MySQLDSN) }
