package backends

import (
	"context"
	"fmt"
	"net/url"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/zookeeper"
)

// OpenZooKeeper opens a ZooKeeper Locker for a zk:// URL: a comma-separated
// server list and an optional path, the root node of the locks (default
// zookeeper.DefaultRoot). user:password authenticates with digest and makes
// the Locker's nodes the creator's alone (zookeeper.Config.Digest). The session timeout requested is the TTL (see the
// zookeeper package's Limits): keep it within the server's session bounds.
func OpenZooKeeper(ctx context.Context, u *url.URL, opts ...locker.Option) (l locker.Locker, err error) {
	hs, err := hosts(u)
	if err != nil {
		return nil, err
	}
	q := backendQuery(u)
	insecure, err := takeBool(u, q, "insecure")
	if err != nil {
		return nil, err
	}
	if err := unknownParams(u, q); err != nil {
		return nil, err
	}
	// go-zookeeper has no TLS: a digest password always travels in
	// cleartext.
	if err := cleartextPassword(u, hs, false, insecure); err != nil {
		return nil, err
	}
	set, err := locker.Resolve(opts...)
	if err != nil {
		return nil, err
	}
	conn, events, err := zk.Connect(hs, set.TTL, zk.WithLogger(discardZKLogger{}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper %s: %w", u.Redacted(), err)
	}
	defer closeOnError(&err, func() error { conn.Close(); return nil })
	cfg := zookeeper.Config{}
	if u.Path != "" && u.Path != "/" {
		cfg.Root = u.Path
	}
	// zk://user:password@… authenticates with digest, and makes the
	// Locker's nodes the creator's alone (see zookeeper.Config.Digest).
	if u.User != nil {
		pw, ok := u.User.Password()
		if !ok || u.User.Username() == "" {
			return nil, fmt.Errorf("%w: %s: zookeeper credentials must be user:password (digest)", locker.ErrBadURL, u.Redacted())
		}
		cfg.Digest = u.User.Username() + ":" + pw
	}
	return cfg.New(conn, events, append(opts, locker.WithOnClose(func() error { conn.Close(); return nil }))...)
}

// discardZKLogger keeps go-zookeeper from writing to the standard logger.
type discardZKLogger struct{}

func (discardZKLogger) Printf(string, ...any) {}
