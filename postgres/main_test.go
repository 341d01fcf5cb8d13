package postgres_test

import (
	"os"
	"testing"

	"github.com/golocker/locker/internal/storeenv"
)

// exampleURL is the URL of the test database, for the examples.
var exampleURL = os.Getenv(storeenv.PostgresURL)

// TestMain skips the examples without a server (or fails under CI), and
// checks that no goroutine outlived its test.
func TestMain(m *testing.M) { storeenv.Main(m, storeenv.PostgresURL) }
