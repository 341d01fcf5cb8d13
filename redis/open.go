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

// Open opens a Redis Locker on one server for a redis:// or rediss:// URL;
// it is the [locker.OpenFunc] of those schemes:
//
//	var mux locker.Mux
//	err := errors.Join(mux.Register("redis", redis.Open), mux.Register("rediss", redis.Open))
//	l, err := locker.Open(ctx, &mux, "redis://:pass@127.0.0.1:6379/0")
//
// The client is configured by go-redis's ParseURL (user, password, database
// number and its query options). rediss:// speaks TLS, verified against the
// system roots or the PEM file of parameter ca_file; cert_file and key_file
// name a client certificate and its key. A password goes to a host other
// than this machine only over TLS, or with insecure=true. nopubsub=true
// sets [Config.NoPubSub]. The Locker owns the client: its Close closes it.
//
// A comma-separated host list names a Cluster: register [OpenCluster] for
// it (Open refuses it, so that a program using one server does not link
// go-redis's Cluster client).
func Open(ctx context.Context, u *url.URL, opts ...locker.Option) (locker.Locker, error) {
	return open(ctx, u, opts, false, singleClient)
}

// OpenCluster opens a Redis Locker on a Cluster for a redis:// or rediss://
// URL whose host part lists seed nodes, comma-separated
// (redis://h1:6379,h2:6379,h3:6379); it is the [locker.OpenFunc] to register
// for a Cluster, with the parameters of [Open] and those of go-redis's
// ParseClusterURL.
func OpenCluster(ctx context.Context, u *url.URL, opts ...locker.Option) (locker.Locker, error) {
	return open(ctx, u, opts, true, clusterClient)
}

// clientMaker makes the go-redis client of URL v (the Locker's parameters
// taken out) for hosts hs, with the roots and certificates of tc.
type clientMaker func(p *lockurl.Params, v url.URL, hs []string, tc *tls.Config) (goredis.UniversalClient, error)

// open is Open and OpenCluster: they differ in the client they make, passed
// as a function so that a program that never calls OpenCluster does not
// link the Cluster client.
func open(ctx context.Context, u *url.URL, opts []locker.Option, cluster bool, mk clientMaker) (l locker.Locker, err error) {
	p := lockurl.Parse(u)
	hs, err := p.Hosts()
	if err != nil {
		return nil, err
	}
	if len(hs) > 1 && !cluster {
		return nil, p.Errorf("a host list names a Cluster: register redis.OpenCluster for it")
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
	var cfg Config
	if cfg.NoPubSub, err = p.Bool("nopubsub"); err != nil {
		return nil, err
	}
	client, err := mk(p, *u, hs, tc)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = client.Close()
		}
	}()
	if err := client.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis %s: %w", u.Redacted(), err)
	}
	return cfg.New(client, append(opts, locker.WithOnClose(client.Close))...)
}

// singleClient is the client of Open: go-redis's ParseURL reads the
// parameters left.
func singleClient(p *lockurl.Params, v url.URL, _ []string, tc *tls.Config) (goredis.UniversalClient, error) {
	v.RawQuery = p.Rest().Encode()
	o, err := goredis.ParseURL(v.String())
	if err != nil {
		return nil, p.Errorf("%v", err)
	}
	// ctx deadlines must bound every call (see the package doc): an Unlock
	// or a cancelled Lock must not wait for the read timeout.
	o.ContextTimeoutEnabled = true
	withTLS(o.TLSConfig, tc)
	return goredis.NewClient(o), nil
}

// clusterClient is the client of OpenCluster: go-redis's ParseClusterURL
// reads the parameters left, and the extra nodes as addr parameters.
func clusterClient(p *lockurl.Params, v url.URL, hs []string, tc *tls.Config) (goredis.UniversalClient, error) {
	q := p.Rest()
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
	return goredis.NewClusterClient(o), nil
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
