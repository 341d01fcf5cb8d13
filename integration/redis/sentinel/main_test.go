// Package sentinel_test holds the Redis tests on a Sentinel deployment of
// their own (a primary, a replica and three sentinels): the conformance
// suite through go-redis's failover client, failovers under load, writes
// that wait for the replica (Config.Replicas), and the URL route. They run
// apart from integration/redis so that go test runs both packages at once.
package sentinel_test

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
