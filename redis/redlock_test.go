package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/redis"
)

// TestNewRedlockRefuses: NewRedlock refuses, with an error matching
// ErrInvalidOption that names the problem, master sets that cannot give
// Redlock's guarantees and invalid settings, before any connection.
func TestNewRedlockRefuses(t *testing.T) {
	masters := func(n int) []redis.Master {
		ms := make([]redis.Master, n)
		for i := range ms {
			c := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", 1+i)})
			t.Cleanup(func() { _ = c.Close() })
			ms[i] = c
		}
		return ms
	}
	same := masters(3)
	same[2] = same[0]
	withNil := masters(3)
	withNil[1] = nil
	withZero := masters(3)
	withZero[1] = &goredis.Client{}
	for _, tc := range []struct {
		name    string
		cfg     redis.RedlockConfig
		masters []redis.Master
		opts    []locker.Option
		want    string
	}{
		{"none", redis.RedlockConfig{}, nil, nil, "at least 3 masters, got 0"},
		{"one", redis.RedlockConfig{}, masters(1), nil, "at least 3 masters, got 1"},
		{"four", redis.RedlockConfig{}, masters(4), nil, "odd number of masters, got 4"},
		{"repeated", redis.RedlockConfig{}, same, nil, "masters 0 and 2 are the same client"},
		{"nil", redis.RedlockConfig{}, withNil, nil, "master 1 is nil"},
		{"zero", redis.RedlockConfig{}, withZero, nil, "master 1 is a zero *redis.Client"},
		{"retention", redis.RedlockConfig{FenceRetention: time.Millisecond}, masters(3), nil, "FenceRetention"},
		{"negative timeout", redis.RedlockConfig{Timeout: -time.Second}, masters(3), nil, "Timeout -1s is negative"},
		{"negative restart delay", redis.RedlockConfig{RestartDelay: -time.Second}, masters(3), nil, "RestartDelay -1s is negative"},
		{"timeout above TTL", redis.RedlockConfig{Timeout: 2 * time.Second}, masters(3), []locker.Option{locker.WithTTL(time.Second)}, "exceeds the TTL"},
	} {
		l, err := tc.cfg.New(tc.masters, tc.opts...)
		if err == nil {
			_ = l.Close()
			t.Errorf("%s: New must fail", tc.name)
			continue
		}
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v; want an error matching ErrInvalidOption containing %q", tc.name, err, tc.want)
		}
	}
	l, err := redis.NewRedlock(masters(5))
	if err != nil {
		t.Fatalf("NewRedlock(5 masters) = %v", err)
	}
	_ = l.Close()
}

// Three independent Redis servers, and a lock that holds as long as a
// majority of them keep it. (The example's three "servers" are three
// databases of the test server; in production each master is its own
// server, on its own machine.)
func ExampleNewRedlock() {
	ctx := context.Background()
	var masters []redis.Master
	for db := 1; db <= 3; db++ {
		c := goredis.NewClient(&goredis.Options{Addr: redisAddr, DB: db, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		masters = append(masters, c)
	}
	l, err := redis.NewRedlock(masters, locker.WithTTL(10*time.Second), locker.WithPrefix("example-redlock:"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	first, err := l.TryLock(ctx, "invoice:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = l.TryLock(ctx, "invoice:42")
	fmt.Println("second TryLock:", errors.Is(err, locker.ErrNotAcquired))
	token := first.Token() // pass it to the store you protect
	if err := first.Unlock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	again, err := l.TryLock(ctx, "invoice:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer again.Unlock(ctx)
	fmt.Println("token increased:", again.Token() > token)
	// Output:
	// second TryLock: true
	// token increased: true
}

// TestOpenRedlockRefusesBadURLs: a redlock:// URL must list an odd number of
// hosts, at least three, and its RedlockConfig parameters must be positive
// durations; anything else is refused before any connection, with an error
// matching ErrBadURL that names the problem.
func TestOpenRedlockRefusesBadURLs(t *testing.T) {
	const three = "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
	for _, tc := range []struct{ raw, want string }{
		{"redlock://127.0.0.1:1", "odd number of hosts"},
		{"redlock://127.0.0.1:1,127.0.0.1:2", "odd number of hosts"},
		{"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4", "odd number of hosts"},
		{three + "?restart_delay=-1s", "restart_delay"},
		{three + "?restart_delay=soon", "restart_delay"},
		{three + "?fence_retention=0s", "fence_retention"},
		{three + "?master_timeout=x", "master_timeout"},
	} {
		u, _ := url.Parse(tc.raw)
		l, err := redis.OpenRedlock(t.Context(), u)
		if err == nil {
			_ = l.Close()
			t.Errorf("OpenRedlock(%s) must fail", tc.raw)
			continue
		}
		if !errors.Is(err, locker.ErrBadURL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenRedlock(%s) = %v; want ErrBadURL naming %q", tc.raw, err, tc.want)
		}
	}
}
