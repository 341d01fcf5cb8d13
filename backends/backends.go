// Package backends registers locker's built-in backends with a [locker.Mux],
// so that the backend is chosen by a URL from configuration:
//
//	var mux locker.Mux
//	if err := backends.Register(&mux); err != nil { … }
//	l, err := locker.Open(ctx, &mux, os.Getenv("LOCK_URL"))
//
// | scheme      | example                                              | client                              |
// |-------------|------------------------------------------------------|-------------------------------------|
// | redis       | redis://:pass@127.0.0.1:6379/0                       | go-redis Client (ParseURL options)  |
// | redis       | redis://h1:6379,h2:6379,h3:6379                      | go-redis ClusterClient              |
// | redis       | redis://s1:26379,s2:26379/0?master_name=mymaster     | go-redis FailoverClient (Sentinel)  |
// | rediss      | rediss://h:6380?ca_file=ca.pem                       | the same with TLS                   |
// | redlock(s)  | redlock://h1:6379,h2:6379,h3:6379                    | one go-redis Client per master      |
// | mysql       | mysql://user:pass@127.0.0.1:3306/app?table=my_locks  | GORM on go-sql-driver/mysql         |
// | postgres(ql)| postgres://app:pass@127.0.0.1:5432/app?table=locks   | pgxpool (pgx v5)                    |
// | etcd        | etcd://127.0.0.1:2379,127.0.0.1:22379                | clientv3                            |
// | etcds       | etcds://h:2379?cacert=ca.pem&cert=c.pem&key=k.pem    | clientv3 over TLS (mTLS with cert)  |
// | zk          | zk://user:pass@127.0.0.1:2181/locks                  | go-zookeeper (digest auth)          |
//
// TLS: rediss:// and mysql:// take ca_file, cert_file and key_file,
// postgres:// takes pgx's sslmode, sslrootcert, sslcert and sslkey, etcds://
// takes cacert, cert and key (PEM files: a private CA, a client certificate
// and its key). A password is never sent in cleartext to a host other than
// this machine (localhost, a loopback address) unless the URL says
// insecure=true; ZooKeeper (no TLS in go-zookeeper) always needs it beyond
// loopback.
//
// Every scheme also takes ttl=<duration> and prefix=<string>. The Locker
// owns the client it opened: its Close closes it. Nothing registers itself:
// the application calls Register.
//
// Register links every backend's client into the program. A program that
// uses one store registers only that backend's opener, and links nothing
// else (this module is then not needed at all):
//
//	var mux locker.Mux
//	err := mux.Register("redis", redis.Open)
package backends

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/golocker/locker"
	"github.com/golocker/locker/etcd"
	"github.com/golocker/locker/mysql"
	"github.com/golocker/locker/postgres"
	"github.com/golocker/locker/redis"
	"github.com/golocker/locker/zookeeper"
)

// Register registers every built-in scheme with m: redis and rediss
// ([redis.Open] for one host, [redis.OpenCluster] for a host list,
// [redis.OpenSentinel] with parameter master_name), redlock and redlocks
// ([redis.OpenRedlock]), mysql ([mysql.Open]), postgres and postgresql ([postgres.Open]), etcd and etcds ([etcd.Open]) and zk
// ([zookeeper.Open]).
func Register(m *locker.Mux) error {
	if m == nil {
		return fmt.Errorf("%w: nil *locker.Mux", locker.ErrInvalidOption)
	}
	return errors.Join(
		m.Register("redis", openRedis),
		m.Register("rediss", openRedis),
		m.Register("redlock", redis.OpenRedlock),
		m.Register("redlocks", redis.OpenRedlock),
		m.Register("mysql", mysql.Open),
		m.Register("postgres", postgres.Open),
		m.Register("postgresql", postgres.Open),
		m.Register("etcd", etcd.Open),
		m.Register("etcds", etcd.Open),
		m.Register("zk", zookeeper.Open),
	)
}

// openRedis opens a primary behind Sentinels (master_name), a single node
// or, for a host list, a Cluster.
func openRedis(ctx context.Context, u *url.URL, opts ...locker.Option) (locker.Locker, error) {
	if u.Query().Has("master_name") {
		return redis.OpenSentinel(ctx, u, opts...)
	}
	if strings.Contains(u.Host, ",") {
		return redis.OpenCluster(ctx, u, opts...)
	}
	return redis.Open(ctx, u, opts...)
}
