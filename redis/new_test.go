package redis_test

import (
	"errors"
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
