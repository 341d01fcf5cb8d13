// Package zookeeper_test holds the ZooKeeper tests that see the backend from
// outside: the conformance suite (restarts, partitions through proxies),
// ACLs, sessions and the store behaviour. The white-box tests and the
// examples stay beside the code, in the zookeeper module (see
// internal/storeenv).
package zookeeper_test

import (
	"testing"

	"github.com/golocker/locker/internal/testenv"
)

// TestMain runs 4 parallel tests at once: the conformance cases mostly wait
// for expiries and backoffs.
func TestMain(m *testing.M) {
	testenv.Parallel(4)
	testenv.Main(m)
}
