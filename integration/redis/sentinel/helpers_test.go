package sentinel_test

import "github.com/golocker/locker/integration/internal/redistest"

// testTTL is the TTL of the conformance harness.
const testTTL = redistest.TTL
