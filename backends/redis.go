package backends

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/redis"
)

// OpenRedis opens a Redis Locker for a redis:// or rediss:// URL. One host
// gives a single-node client configured by go-redis's ParseURL (user,
// password, database number and its query options); a comma-separated host
// list gives a Cluster client. rediss:// speaks TLS, verified against the
// system roots or the PEM file of parameter ca_file; cert_file and key_file
// name a client certificate and its key.
func OpenRedis(ctx context.Context, u *url.URL, opts ...locker.Option) (l locker.Locker, err error) {
	hs, err := hosts(u)
	if err != nil {
		return nil, err
	}
	q := backendQuery(u)
	tc, err := tlsParams(u, q, "rediss", "ca_file", "cert_file", "key_file")
	if err != nil {
		return nil, err
	}
	insecure, err := takeBool(u, q, "insecure")
	if err != nil {
		return nil, err
	}
	if err := cleartextPassword(u, hs, u.Scheme == "rediss", insecure); err != nil {
		return nil, err
	}
	v := *u
	v.RawQuery = q.Encode()
	var client goredis.UniversalClient
	if len(hs) == 1 {
		o, err := goredis.ParseURL(v.String())
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", locker.ErrBadURL, u.Redacted(), err)
		}
		// ctx deadlines must bound every call (see the redis package doc):
		// an Unlock or a cancelled Lock must not wait for the read timeout.
		o.ContextTimeoutEnabled = true
		withTLS(o.TLSConfig, tc)
		client = goredis.NewClient(o)
	} else {
		// go-redis spells extra cluster nodes as addr parameters.
		v.Host = hs[0]
		q := v.Query()
		for _, h := range hs[1:] {
			q.Add("addr", h)
		}
		v.RawQuery = q.Encode()
		o, err := goredis.ParseClusterURL(v.String())
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", locker.ErrBadURL, u.Redacted(), err)
		}
		o.ContextTimeoutEnabled = true
		withTLS(o.TLSConfig, tc)
		client = goredis.NewClusterClient(o)
	}
	defer closeOnError(&err, client.Close)
	if err := client.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis %s: %w", u.Redacted(), err)
	}
	return redis.New(client, append(opts, locker.WithOnClose(client.Close))...)
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
