package backends

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
)

// OpenEtcd opens an etcd Locker for an etcd:// or etcds:// URL: a
// comma-separated list of endpoints; user and password, when given,
// authenticate. etcds:// speaks TLS, verified against the system roots or
// the PEM file of parameter cacert; cert and key name a client certificate
// and its key (PEM files). Parameter dial_timeout (default 5s) bounds the
// first connection.
func OpenEtcd(ctx context.Context, u *url.URL, opts ...locker.Option) (l locker.Locker, err error) {
	hs, err := hosts(u)
	if err != nil {
		return nil, err
	}
	q := backendQuery(u)
	dial := 5 * time.Second
	if v := q.Get("dial_timeout"); v != "" {
		if dial, err = time.ParseDuration(v); err != nil || dial <= 0 {
			return nil, fmt.Errorf("%w: %s: parameter dial_timeout=%q is not a positive duration", locker.ErrBadURL, u.Redacted(), v)
		}
		q.Del("dial_timeout")
	}
	tc, err := tlsParams(u, q, "etcds", "cacert", "cert", "key")
	if err != nil {
		return nil, err
	}
	insecure, err := takeBool(u, q, "insecure")
	if err != nil {
		return nil, err
	}
	if err := unknownParams(u, q); err != nil {
		return nil, err
	}
	if err := cleartextPassword(u, hs, u.Scheme == "etcds", insecure); err != nil {
		return nil, err
	}
	set, err := locker.Resolve(opts...)
	if err != nil {
		return nil, err
	}
	// The client logs where the Locker does, not to stderr.
	cfg := clientv3.Config{Endpoints: hs, DialTimeout: dial, Context: context.WithoutCancel(ctx), Logger: etcd.SlogLogger(set.Logger)}
	how := "plain"
	if u.Scheme == "etcds" {
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12} // the system roots
		}
		cfg.TLS = tc
		for i, h := range cfg.Endpoints {
			cfg.Endpoints[i] = "https://" + h
		}
		how = "TLS"
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %s (%s): %w", u.Redacted(), how, err)
	}
	defer closeOnError(&err, cli.Close)
	return etcd.NewContext(ctx, cli, append(opts, locker.WithOnClose(cli.Close))...)
}
