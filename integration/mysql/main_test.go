// Package mysql_test holds the MySQL tests: the conformance suite (restarts,
// partitions through proxies), the store behaviour, named-lock wake-ups and
// the benchmarks against the raw database/sql floor. The examples stay
// beside the code, in the mysql module (see internal/storeenv).
package mysql_test

import (
	"testing"

	"github.com/golocker/locker/internal/testenv"
)

// TestMain runs the package's tests. Every test runs in parallel with the
// others (t.Parallel), at most -parallel at once as before: each
// conformance harness has a server of its own, which its Restart hook
// restarts, and each other test a database of its own on the shared
// server (testenv.NewDatabase). So no test runs alone: not a harness's
// last long cases, nor the tests that ran one after another before. The
// tests whose Lockers have a 1 s TTL are the exception: they run first,
// one at a time, as before, since their renewals every third of a second
// starved beside the harnesses' cases at load 30 (TestGuard and
// TestBatchRenewal lost their locks).
func TestMain(m *testing.M) { testenv.Main(m) }
