// Package redis_test holds the Redis tests that need servers of their own or
// see the backend from outside: the conformance suite on a single node and on
// a Cluster (restarts, partitions through proxies) and restarts without
// persistence. The white-box store tests stay beside the code, in the redis
// module (see internal/storeenv). The tests of Redlock and of a Sentinel
// deployment are in the packages redlock and sentinel below this one, so
// that go test runs them at the same time as these.
package redis_test

import (
	"testing"

	"github.com/golocker/locker/internal/testenv"
)

// TestMain runs 4 parallel tests at once: the conformance cases mostly wait
// for expiries and backoffs. The conformance harnesses run in parallel with
// each other (t.Parallel), still 4 cases at once in all: each has a server
// of its own, so a case that restarts it disturbs no other harness, and a
// harness's last long cases do not run alone.
func TestMain(m *testing.M) {
	testenv.Parallel(4)
	testenv.Main(m)
}
