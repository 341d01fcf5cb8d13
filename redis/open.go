package redis

import (
	"context"
	"crypto/tls"
	"net/url"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver/lockurl"
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
// sets [Config.NoPubSub], noinbox=true [Config.NoInbox], unfair=true [Config.Unfair], replicas=n and replica_timeout=<duration>
// [Config.Replicas] and [Config.ReplicaTimeout]. The Locker owns the client:
// its Close closes it. A call whose ctx can end runs on a connection of its
// own, outside the client's pool (pool_size): one per such call in
// progress, and at most 16 kept idle.
//
// Parameter protocol sets the client's RESP version: 2 or 3 (without it,
// go-redis's default, RESP3); any other value is refused with an error
// naming it. The Locker works alike on both.
//
// A comma-separated host list names a Cluster: register [OpenCluster] for
// it (Open refuses it, so that a program using one server does not link
// go-redis's Cluster client); parameter master_name names a primary behind
// Sentinels: register [OpenSentinel].
func Open(ctx context.Context, u *url.URL, opts ...locker.Option) (locker.Locker, error) {
	if u.Query().Has("master_name") {
		return nil, lockurl.Parse(u).Errorf("parameter master_name names a primary monitored by Sentinels: register redis.OpenSentinel for it")
	}
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

// OpenSentinel opens a Redis Locker on the primary that a group of Redis
// Sentinels monitors, through go-redis's failover client, for a redis:// or
// rediss:// URL whose host part lists sentinels, comma-separated, and whose
// parameter master_name names the primary:
//
//	redis://:pass@s1:26379,s2:26379,s3:26379/0?master_name=mymaster
//
// The URL's user and password are the primary's (as for [Open]);
// sentinel_username and sentinel_password are the sentinels' own, when
// they require one. The other parameters are those of [Open] and of
// go-redis's ParseFailoverURL. backends.Register routes a redis:// URL with
// master_name here. Set replicas=n (and replica_timeout) for
// [Config.Replicas]: without it, a failover can lose the locks taken just
// before (see the package doc, Replicated before granted).
func OpenSentinel(ctx context.Context, u *url.URL, opts ...locker.Option) (locker.Locker, error) {
	// The sentinels' credentials leave the URL before anything can put it
	// in an error.
	v := *u
	q := v.Query()
	auth := sentinelAuth{user: q.Get("sentinel_username"), pass: q.Get("sentinel_password"), hasPass: q.Has("sentinel_password")}
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	v.RawQuery = q.Encode()
	return open(ctx, &v, opts, true, auth.client)
}

// urlProtocol takes parameter protocol, the RESP version of an owned client:
// 2 or 3, and 0 (go-redis's default) when absent.
func urlProtocol(p *lockurl.Params) (int, error) {
	v, ok := p.Take("protocol")
	if !ok {
		return 0, nil
	}
	switch v {
	case "2":
		return 2, nil
	case "3":
		return 3, nil
	}
	return 0, p.Errorf("parameter protocol=%q is not a RESP version (2 or 3)", v)
}

// target is where a client made by a clientMaker connects, and how: the
// URL's hosts, the roots and certificates of its TLS file parameters (nil
// without), whether it uses TLS or accepts cleartext secrets
// (insecure=true), and its RESP version.
type target struct {
	hosts            []string
	tls              *tls.Config
	secure, insecure bool
	protocol         int
}

// clientMaker makes the go-redis client of URL v (the Locker's parameters
// taken out) for to.
type clientMaker func(p *lockurl.Params, v url.URL, to target) (goredis.UniversalClient, error)

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
	if cfg.NoInbox, err = p.Bool("noinbox"); err != nil {
		return nil, err
	}
	if cfg.Unfair, err = p.Bool("unfair"); err != nil {
		return nil, err
	}
	if v, ok := p.Take("replicas"); ok {
		if cfg.Replicas, err = strconv.Atoi(v); err != nil || cfg.Replicas < 0 {
			return nil, p.Errorf("parameter replicas=%q is not a number of replicas", v)
		}
	}
	if cfg.ReplicaTimeout, err = p.Duration("replica_timeout", 0); err != nil {
		return nil, err
	}
	proto, err := urlProtocol(p)
	if err != nil {
		return nil, err
	}
	client, err := mk(p, *u, target{hosts: hs, tls: tc, secure: u.Scheme == "rediss", insecure: insecure, protocol: proto})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = client.Close()
		}
	}()
	if err := client.Ping(ctx).Err(); err != nil {
		return nil, p.Wrap("redis", err)
	}
	return cfg.New(client, append(opts, locker.WithOnClose(client.Close))...)
}

// singleClient is the client of Open: go-redis's ParseURL reads the
// parameters left.
func singleClient(p *lockurl.Params, v url.URL, to target) (goredis.UniversalClient, error) {
	v.RawQuery = p.Rest().Encode()
	o, err := goredis.ParseURL(v.String())
	if err != nil {
		return nil, p.Errorf("%v", err)
	}
	o.Protocol = to.protocol
	// ctx deadlines must bound every call (see the package doc): an Unlock
	// or a cancelled Lock must not wait for the read timeout.
	o.ContextTimeoutEnabled = true
	withTLS(o.TLSConfig, to.tls)
	// Calls whose ctx can end run on connections the Locker cuts (cut.go).
	return newOwnedClient(o), nil
}

// clusterClient is the client of OpenCluster: go-redis's ParseClusterURL
// reads the parameters left, and the extra nodes as addr parameters.
func clusterClient(p *lockurl.Params, v url.URL, to target) (goredis.UniversalClient, error) {
	v.RawQuery = withAddrs(p.Rest(), to.hosts[1:]).Encode()
	v.Host = to.hosts[0]
	o, err := goredis.ParseClusterURL(v.String())
	if err != nil {
		return nil, p.Errorf("%v", err)
	}
	o.Protocol = to.protocol
	o.ContextTimeoutEnabled = true
	withTLS(o.TLSConfig, to.tls)
	return goredis.NewClusterClient(o), nil
}

// withAddrs adds hosts to q as addr parameters, go-redis's way of naming
// more than one node in a URL.
func withAddrs(q url.Values, hosts []string) url.Values {
	for _, h := range hosts {
		q.Add("addr", h)
	}
	return q
}

// sentinelAuth are the sentinels' credentials of an OpenSentinel URL.
type sentinelAuth struct {
	user, pass string
	hasPass    bool
}

// client is the clientMaker of OpenSentinel: go-redis's ParseFailoverURL
// reads the parameters left, the extra sentinels as addr parameters; the
// URL's user and password go to the primary (ParseFailoverURL would give
// them to the sentinels), a.user and a.pass to the sentinels.
func (a sentinelAuth) client(p *lockurl.Params, v url.URL, to target) (goredis.UniversalClient, error) {
	if err := p.CheckSecret("sentinel_password", a.hasPass, to.hosts, to.secure, to.insecure); err != nil {
		return nil, err
	}
	q := p.Rest()
	if q.Get("master_name") == "" {
		return nil, p.Errorf("parameter master_name (the primary's name at the sentinels) is missing")
	}
	user := v.User
	v.User = nil
	v.RawQuery = withAddrs(q, to.hosts[1:]).Encode()
	v.Host = to.hosts[0]
	o, err := goredis.ParseFailoverURL(v.String())
	if err != nil {
		return nil, p.Errorf("%v", err)
	}
	o.Protocol = to.protocol
	o.Username = user.Username()
	o.Password, _ = user.Password()
	o.SentinelUsername, o.SentinelPassword = a.user, a.pass
	o.ContextTimeoutEnabled = true
	withTLS(o.TLSConfig, to.tls)
	return goredis.NewFailoverClient(o), nil
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
