package redis_test

import (
	"testing"
	"time"

	scen "github.com/golocker/locker/integration/internal/contend"
)

// newFIFOMulti is the multi-key scenario's "fifo" reference: newFIFO on
// the keys of scen.MultiKeys(key).
func newFIFOMulti(b *testing.B, addr, key string, ttl time.Duration) scen.Mutex {
	return newFIFO(b, addr, scen.MultiKeys(key), ttl)
}
