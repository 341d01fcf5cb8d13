// Package postgres_test holds the PostgreSQL tests: the conformance suite
// on a pgx pool, on a *sql.DB through pgx/stdlib and through PgBouncer in
// transaction pooling mode (restarts, partitions through proxies).
package postgres_test

import (
	"testing"

	"github.com/golocker/locker/internal/testenv"
)

// TestMain runs the package's tests. The conformance harnesses run in
// parallel with each other (t.Parallel), at most -parallel cases at once as
// before: each has a server of its own, so a case that restarts it disturbs
// no other harness, and a harness's last long cases do not run alone.
func TestMain(m *testing.M) { testenv.Main(m) }
