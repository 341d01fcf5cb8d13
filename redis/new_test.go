package redis_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/redis"
)

// TestNewRefusesZeroClients: a client that was not made by its constructor
// is refused by New with an error naming it, never a panic later.
func TestNewRefusesZeroClients(t *testing.T) {
	for name, c := range map[string]redis.Client{
		"*redis.Client":        &goredis.Client{},
		"*redis.ClusterClient": &goredis.ClusterClient{},
		"*redis.Ring":          &goredis.Ring{},
		"nil":                  nil,
		"typed nil":            (*goredis.Client)(nil),
	} {
		l, err := redis.New(c)
		if err == nil {
			_ = l.Close()
			t.Errorf("New(%s) must fail", name)
			continue
		}
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), strings.TrimPrefix(name, "typed ")) {
			t.Errorf("New(%s) = %v; want an error matching ErrInvalidOption that names it", name, err)
		}
	}
}

// TestOpenRefusesHostList: Open is for one server; a host list names a
// Cluster and gets an error pointing to OpenCluster, before any connection.
func TestOpenRefusesHostList(t *testing.T) {
	u, _ := url.Parse("redis://127.0.0.1:1,127.0.0.1:2")
	l, err := redis.Open(t.Context(), u)
	if err == nil {
		_ = l.Close()
		t.Fatal("Open with a host list must fail")
	}
	if !errors.Is(err, locker.ErrBadURL) || !strings.Contains(err.Error(), "redis.OpenCluster") {
		t.Errorf("Open(host list) = %v; want ErrBadURL naming redis.OpenCluster", err)
	}
}
