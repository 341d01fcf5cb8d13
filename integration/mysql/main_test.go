// Package mysql_test holds the MySQL tests: the conformance suite (restarts,
// partitions through proxies), the store behaviour, named-lock wake-ups and
// the benchmarks against the raw database/sql floor. The examples stay
// beside the code, in the mysql module (see internal/storeenv).
package mysql_test

import (
	"testing"

	"github.com/golocker/locker/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
