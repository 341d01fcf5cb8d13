package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver/lockurl"
)

// OpenRedlock opens a Redlock Locker (see [NewRedlock]) for a redlock:// or
// redlocks:// URL whose host part lists the masters, comma-separated; it is
// the [locker.OpenFunc] to register for those schemes:
//
//	var mux locker.Mux
//	err := errors.Join(mux.Register("redlock", redis.OpenRedlock), mux.Register("redlocks", redis.OpenRedlock))
//	l, err := locker.Open(ctx, &mux, "redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379?ttl=10s")
//
// There must be an odd number of hosts, at least three, each an
// independent Redis server. Every master gets a client made as [Open] makes
// one (user, password, database number and go-redis's ParseURL query
// options apply to each), with ContextTimeoutEnabled set and go-redis's own
// retries off (MaxRetries -1, DialerRetries 1: the engine decides when to
// try again, and a dead master costs one refused dial, not five).
// redlocks:// speaks TLS, with ca_file, cert_file and key_file as for
// rediss://; a password goes to a host other than this machine only over
// TLS, or with insecure=true. restart_delay, fence_retention and
// master_timeout (Go durations) set [RedlockConfig]'s RestartDelay,
// FenceRetention and Timeout; protocol is the clients' RESP version, as
// for [Open]. OpenRedlock pings every master and fails when fewer than a
// majority answer. The Locker owns the clients: its Close closes them.
func OpenRedlock(ctx context.Context, u *url.URL, opts ...locker.Option) (locker.Locker, error) {
	p := lockurl.Parse(u)
	hs, err := p.Hosts()
	if err != nil {
		return nil, err
	}
	if len(hs) < 3 || len(hs)%2 == 0 {
		return nil, p.Errorf("redlock needs an odd number of hosts, at least 3, got %d", len(hs))
	}
	tc, err := p.TLS("redlocks", "ca_file", "cert_file", "key_file")
	if err != nil {
		return nil, err
	}
	insecure, err := p.Bool("insecure")
	if err != nil {
		return nil, err
	}
	secure := u.Scheme == "redlocks"
	if err := p.CheckPassword(hs, secure, insecure); err != nil {
		return nil, err
	}
	var cfg RedlockConfig
	if cfg.RestartDelay, err = p.Duration("restart_delay", 0); err != nil {
		return nil, err
	}
	if cfg.FenceRetention, err = p.Duration("fence_retention", 0); err != nil {
		return nil, err
	}
	if cfg.Timeout, err = p.Duration("master_timeout", 0); err != nil {
		return nil, err
	}
	proto, err := urlProtocol(p)
	if err != nil {
		return nil, err
	}
	v := *u
	v.Scheme = "redis"
	if secure {
		v.Scheme = "rediss"
	}
	v.RawQuery = p.Rest().Encode()
	clients := make([]*goredis.Client, 0, len(hs))
	closeAll := func() error {
		var errs []error
		for _, c := range clients {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	masters := make([]Master, 0, len(hs))
	for _, h := range hs {
		v.Host = h
		o, err := goredis.ParseURL(v.String())
		if err != nil {
			_ = closeAll()
			return nil, p.Errorf("%v", err)
		}
		o.Protocol = proto
		o.ContextTimeoutEnabled = true
		o.MaxRetries, o.DialerRetries = -1, 1
		withTLS(o.TLSConfig, tc)
		c := goredis.NewClient(o)
		clients = append(clients, c)
		masters = append(masters, c)
	}
	if err := pingQuorum(ctx, clients); err != nil {
		_ = closeAll()
		return nil, p.Wrap("redlock", err)
	}
	l, err := cfg.New(masters, append(opts, locker.WithOnClose(closeAll))...)
	if err != nil {
		_ = closeAll()
	}
	return l, err
}

// pingQuorum pings every client at once and fails when fewer than a
// majority answer.
func pingQuorum(ctx context.Context, clients []*goredis.Client) error {
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			if err := c.Ping(ctx).Err(); err != nil {
				errs[i] = fmt.Errorf("%s: %w", c.Options().Addr, err)
			}
		})
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed > len(clients)-(len(clients)/2+1) {
		return fmt.Errorf("%d of %d masters unreachable: %w", failed, len(clients), errors.Join(errs...))
	}
	return nil
}
