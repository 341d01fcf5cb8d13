package zookeeper

import (
	"context"
	"net/url"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker"
	"github.com/golocker/locker/driver/lockurl"
)

// Open opens a ZooKeeper Locker for a zk:// URL; it is the
// [locker.OpenFunc] of that scheme:
//
//	var mux locker.Mux
//	err := mux.Register("zk", zookeeper.Open)
//	l, err := locker.Open(ctx, &mux, "zk://user:pass@127.0.0.1:2181/locks")
//
// The host part is a comma-separated server list, the path the root node of
// the locks (default [DefaultRoot]). user:password authenticates with digest
// and makes the Locker's nodes the creator's alone ([Config].Digest);
// go-zookeeper has no TLS, so a password goes to a host other than this
// machine only with insecure=true. acl sets the ACL of every node the Locker
// creates ([Config].ACL) in the syntax of [ParseACL], for example
// acl=creator,world-read; "creator" needs user:password. The session timeout requested is the TTL
// (see [Limits]): keep it within the server's session bounds. The Locker
// owns the connection: its Close closes it.
func Open(ctx context.Context, u *url.URL, opts ...locker.Option) (l locker.Locker, err error) {
	p := lockurl.Parse(u)
	hs, err := p.Hosts()
	if err != nil {
		return nil, err
	}
	insecure, err := p.Bool("insecure")
	if err != nil {
		return nil, err
	}
	cfg := Config{}
	if v, ok := p.Take("acl"); ok {
		if cfg.ACL, err = ParseACL(v); err != nil {
			return nil, p.Errorf("parameter acl: %v", err)
		}
	}
	if err := p.Unknown(); err != nil {
		return nil, err
	}
	if err := p.CheckPassword(hs, false, insecure); err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		cfg.Root = u.Path
	}
	if u.User != nil {
		pw, ok := u.User.Password()
		if !ok || u.User.Username() == "" {
			return nil, p.Errorf("zookeeper credentials must be user:password (digest)")
		}
		cfg.Digest = u.User.Username() + ":" + pw
	}
	if cfg.Digest == "" && needsAuth(cfg.ACL) {
		return nil, p.Errorf("parameter acl: %q (the auth scheme) needs credentials: zk://user:password@…", ACLCreator)
	}
	set, err := locker.Resolve(opts...)
	if err != nil {
		return nil, err
	}
	conn, events, err := connectOwned(hs, set.TTL)
	if err != nil {
		return nil, p.Wrap("zookeeper", err)
	}
	closeConn := func() error { conn.Close(); return nil }
	defer func() {
		if err != nil {
			_ = closeConn()
		}
	}()
	return cfg.New(conn, events, append(opts, locker.WithOnClose(closeConn))...)
}

// sessionBuffer is how many session events of a connection of its own a
// Locker holds before it drops more (go-zookeeper's own channel holds 6).
const sessionBuffer = 64

// connectOwned connects to the servers hs with the session timeout ttl,
// for a Locker of its own. The returned channel receives the connection's
// session events and nothing else: go-zookeeper also sends every watch
// event to a connection's channel, and the Locker's goroutine that follows
// the session would wake for each, once per contended hand-off. Its reads
// are buffered (see bufferedConn).
func connectOwned(hs []string, ttl time.Duration) (*zk.Conn, <-chan zk.Event, error) {
	sessions := make(chan zk.Event, sessionBuffer)
	forward := func(ev zk.Event) {
		// It runs in go-zookeeper's goroutines: it never blocks.
		if ev.Type != zk.EventSession {
			return
		}
		select {
		case sessions <- ev:
		default:
		}
	}
	conn, _, err := zk.Connect(hs, ttl, zk.WithLogger(discardLogger{}), zk.WithEventCallback(forward), zk.WithDialer(dialBuffered))
	return conn, sessions, err
}

// discardLogger keeps go-zookeeper from writing to the standard logger.
type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
