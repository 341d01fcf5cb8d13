package redis

import "testing"

// TestHashSlot checks hashSlot against slots Redis Cluster documents and
// computes (CLUSTER KEYSLOT).
func TestHashSlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"123456789":              12739, // the CRC16 check value 0x31C3
		"foo":                    12182,
		"{user1000}.following":   hashSlot("user1000"),
		"locker:{a}":             hashSlot("a"),
		"locker:#{00ff}:lock:x}": hashSlot("00ff"),
		"{}x":                    hashSlot("{}x"),
	} {
		if got := hashSlot(key); got != want {
			t.Errorf("hashSlot(%q) = %d; want %d", key, got, want)
		}
	}
}
