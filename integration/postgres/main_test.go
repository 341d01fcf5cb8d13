// Package postgres_test holds the PostgreSQL tests: the conformance suite
// on a pgx pool, on a *sql.DB through pgx/stdlib and through PgBouncer in
// transaction pooling mode (restarts, partitions through proxies).
package postgres_test

import (
	"testing"

	"github.com/golocker/locker/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
