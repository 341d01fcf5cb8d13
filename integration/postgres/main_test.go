// Package postgres_test holds the PostgreSQL tests: the conformance suite
// on a pgx pool, on a *sql.DB through pgx/stdlib and through PgBouncer in
// transaction pooling mode (restarts, partitions through proxies).
package postgres_test

import (
	"testing"

	"github.com/golocker/locker/internal/testenv"
)

// TestMain runs the package's tests. Every test runs in parallel with the
// others (t.Parallel), at most -parallel at once as before: each
// conformance harness has a server of its own, so a case that restarts it
// disturbs no other harness, and each other test has tables of its own on
// the shared server. So no test runs alone: not a harness's last long
// cases, nor the other tests, which ran one after another before the
// harnesses began.
func TestMain(m *testing.M) { testenv.Main(m) }
