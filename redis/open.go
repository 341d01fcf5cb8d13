package redis

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/lockurl"
)

// Open opens a Redis Locker for a redis:// or rediss:// URL; it is the
// [locker.OpenFunc] of those schemes:
//
//	var mux locker.Mux
//	err := errors.Join(mux.Register("redis", redis.Open), mux.Register("rediss", redis.Open))
//	l, err := locker.Open(ctx, &mux, "redis://:pass@127.0.0.1:6379/0")
//
// One host gives a single-node client configured by go-redis's ParseURL
// (user, password, database number and its query options); a
// comma-separated host list gives a Cluster client. rediss:// speaks TLS,
// verified against the system roots or the PEM file of parameter ca_file;
// cert_file and key_file name a client certificate and its key. A password
// goes to a host other than this machine only over TLS, or with
// insecure=true. The Locker owns the client: its Close closes it.
func Open(ctx context.Context, u *url.URL, opts ...locker.Option) (l locker.Locker, err error) {
	p := lockurl.Parse(u)
	hs, err := p.Hosts()
	if err != nil {
		return nil, err
	}
	tc, err := p.TLS("rediss", "ca_file", "cert_file", "key_file")
	if err != nil {
		return nil, err
	}
	insecure, err := p.Bool("insecure")
	if err != nil {
		return nil, err
	}
	if err := p.CheckPassword(hs, u.Scheme == "rediss", insecure); err != nil {
		return nil, err
	}
	v := *u
	q := p.Rest() // go-redis parses its own options
	v.RawQuery = q.Encode()
	var client goredis.UniversalClient
	if len(hs) == 1 {
		o, err := goredis.ParseURL(v.String())
		if err != nil {
			return nil, p.Errorf("%v", err)
		}
		// ctx deadlines must bound every call (see the package doc): an
		// Unlock or a cancelled Lock must not wait for the read timeout.
		o.ContextTimeoutEnabled = true
		withTLS(o.TLSConfig, tc)
		client = goredis.NewClient(o)
	} else {
		// go-redis spells extra cluster nodes as addr parameters.
		v.Host = hs[0]
		for _, h := range hs[1:] {
			q.Add("addr", h)
		}
		v.RawQuery = q.Encode()
		o, err := goredis.ParseClusterURL(v.String())
		if err != nil {
			return nil, p.Errorf("%v", err)
		}
		o.ContextTimeoutEnabled = true
		withTLS(o.TLSConfig, tc)
		client = goredis.NewClusterClient(o)
	}
	defer func() {
		if err != nil {
			_ = client.Close()
		}
	}()
	if err := client.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis %s: %w", u.Redacted(), err)
	}
	return New(client, append(opts, locker.WithOnClose(client.Close))...)
}

// withTLS puts the roots and client certificates of extra, when not nil,
// into dst, the TLS configuration go-redis made for a rediss:// URL.
func withTLS(dst, extra *tls.Config) {
	if dst == nil || extra == nil {
		return
	}
	if extra.RootCAs != nil {
		dst.RootCAs = extra.RootCAs
	}
	dst.Certificates = extra.Certificates
}
