package redis

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/storeenv"
)

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

// TestFenceRetentionIsConfigurable: Config.FenceRetention sets the fence
// keys' lifetime, and a value below a second is refused naming it.
func TestFenceRetentionIsConfigurable(t *testing.T) {
	unused := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer unused.Close()
	if _, err := (Config{FenceRetention: time.Millisecond}).New(unused); err == nil || !strings.Contains(err.Error(), "FenceRetention") {
		t.Fatalf("a retention of 1ms must be refused naming Config.FenceRetention: %v", err)
	}
	srv := storeenv.Redis(t)
	c := newClient(t, srv.Addr())
	l, err := (Config{FenceRetention: 90 * time.Second}).New(c, locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	key := uniqueKey(t)
	lk, err := l.TryLock(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(t.Context())
	if ttl := c.PTTL(t.Context(), name(kindFence, key)).Val(); ttl <= 80*time.Second || ttl > 90*time.Second {
		t.Errorf("the fence key lives %v; want the configured 90s", ttl)
	}
}
