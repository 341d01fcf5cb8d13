package redis

import "testing"

// TestEvictionRisk: only a server with a memory limit and an evicting
// policy puts lock keys at risk.
func TestEvictionRisk(t *testing.T) {
	for _, c := range []struct {
		policy, maxmemory string
		risk              bool
	}{
		{"noeviction", "1073741824", false},
		{"allkeys-lru", "0", false},
		{"allkeys-lru", "1073741824", true},
		{"volatile-ttl", "104857600", true},
		{"volatile-lru", "104857600", true},
		{"", "", false},
	} {
		if msg, risk := evictionRisk(c.policy, c.maxmemory); risk != c.risk || (risk && msg == "") {
			t.Errorf("evictionRisk(%q, %q) = %q, %v; want risk %v", c.policy, c.maxmemory, msg, risk, c.risk)
		}
	}
}
