// Package redlock_test holds the Redis tests of Redlock (redis.NewRedlock)
// on independent masters of their own: the conformance suite on three and
// five masters, masters killed and restarted under contention, and the URL
// route. They run apart from integration/redis so that go test runs both
// packages at once.
package redlock_test

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
