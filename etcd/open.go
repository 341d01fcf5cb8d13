package etcd

import (
	"context"
	"crypto/tls"
	"net/url"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver/lockurl"
)

// Open opens an etcd Locker for an etcd:// or etcds:// URL; it is the
// [locker.OpenFunc] of those schemes:
//
//	var mux locker.Mux
//	err := errors.Join(mux.Register("etcd", etcd.Open), mux.Register("etcds", etcd.Open))
//	l, err := locker.Open(ctx, &mux, "etcd://127.0.0.1:2379,127.0.0.1:22379")
//
// The host part is a comma-separated list of endpoints; user and password,
// when given, authenticate. etcds:// speaks TLS, verified against the
// system roots or the PEM file of parameter cacert; cert and key name a
// client certificate and its key (PEM files). Parameter dial_timeout
// (default [DefaultDialTimeout]) bounds the first connection: Open fails
// with the connection's error when none is up by then. A password goes to a host other
// than this machine only over TLS, or with insecure=true. The Locker owns
// the client: its Close closes it.
func Open(ctx context.Context, u *url.URL, opts ...locker.Option) (l locker.Locker, err error) {
	p := lockurl.Parse(u)
	hs, err := p.Hosts()
	if err != nil {
		return nil, err
	}
	dial, err := p.Duration("dial_timeout", DefaultDialTimeout)
	if err != nil {
		return nil, err
	}
	tc, err := p.TLS("etcds", "cacert", "cert", "key")
	if err != nil {
		return nil, err
	}
	insecure, err := p.Bool("insecure")
	if err != nil {
		return nil, err
	}
	if err := p.Unknown(); err != nil {
		return nil, err
	}
	if err := p.CheckPassword(hs, u.Scheme == "etcds", insecure); err != nil {
		return nil, err
	}
	set, err := locker.Resolve(opts...)
	if err != nil {
		return nil, err
	}
	// The client logs where the Locker does, not to stderr.
	cfg := clientv3.Config{Endpoints: hs, DialTimeout: dial, Context: context.WithoutCancel(ctx), Logger: slogLogger(set.Logger)}
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
		return nil, p.Wrap("etcd ("+how+")", err)
	}
	defer func() {
		if err != nil {
			_ = cli.Close()
		}
	}()
	return newLocker(ctx, cli, dial, append(opts, locker.WithOnClose(cli.Close)))
}
