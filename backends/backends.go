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
// | rediss      | rediss://h:6380?ca_file=ca.pem                       | the same with TLS                   |
// | mysql       | mysql://user:pass@127.0.0.1:3306/app?table=my_locks  | GORM on go-sql-driver/mysql         |
// | etcd        | etcd://127.0.0.1:2379,127.0.0.1:22379                | clientv3                            |
// | etcds       | etcds://h:2379?cacert=ca.pem&cert=c.pem&key=k.pem    | clientv3 over TLS (mTLS with cert)  |
// | zk          | zk://user:pass@127.0.0.1:2181/locks                  | go-zookeeper (digest auth)          |
//
// TLS: rediss:// and mysql:// take ca_file, cert_file and key_file, etcds://
// takes cacert, cert and key (PEM files: a private CA, a client certificate
// and its key). A password is never sent in cleartext to a host other than
// this machine (localhost, a loopback address) unless the URL says
// insecure=true; ZooKeeper (no TLS in go-zookeeper) always needs it beyond
// loopback.
//
// Every scheme also takes ttl=<duration> and prefix=<string>. The Locker
// owns the client it opened: its Close closes it. Nothing registers itself:
// the application calls Register (or registers only the schemes it wants).
package backends

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/golocker/locker"
)

// Register registers every built-in scheme with m: redis, rediss, mysql,
// etcd, etcds and zk.
func Register(m *locker.Mux) error {
	if m == nil {
		return fmt.Errorf("%w: nil *locker.Mux", locker.ErrInvalidOption)
	}
	return errors.Join(
		m.Register("redis", OpenRedis),
		m.Register("rediss", OpenRedis),
		m.Register("mysql", OpenMySQL),
		m.Register("etcd", OpenEtcd),
		m.Register("etcds", OpenEtcd),
		m.Register("zk", OpenZooKeeper),
	)
}

// shared are the query parameters locker.Open handles for every scheme.
var shared = []string{"ttl", "prefix"}

// backendQuery returns u's query without the shared parameters.
func backendQuery(u *url.URL) url.Values {
	q := u.Query()
	for _, k := range shared {
		q.Del(k)
	}
	return q
}

// hosts splits a comma-separated host list.
func hosts(u *url.URL) ([]string, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %s has no host", locker.ErrBadURL, u.Redacted())
	}
	var hs []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, fmt.Errorf("%w: %s has an empty host in its list", locker.ErrBadURL, u.Redacted())
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// closeOnError closes c when *err is set: for openers whose New failed
// after they created a client.
func closeOnError(err *error, c func() error) {
	if *err != nil {
		_ = c()
	}
}

// unknownParams reports backend parameters nobody understood.
func unknownParams(u *url.URL, q url.Values) error {
	if len(q) == 0 {
		return nil
	}
	var names []string
	for k := range q {
		names = append(names, k)
	}
	return fmt.Errorf("%w: %s: unknown parameters %s", locker.ErrBadURL, u.Redacted(), strings.Join(names, ", "))
}

// tlsParams takes the TLS file parameters caName, certName and keyName out
// of q and loads them: nil when none is given. They need the URL's scheme to
// be tlsScheme (rediss, etcds; "" for any), and the certificate and key go
// together.
func tlsParams(u *url.URL, q url.Values, tlsScheme, caName, certName, keyName string) (*tls.Config, error) {
	ca, cert, key := q.Get(caName), q.Get(certName), q.Get(keyName)
	for _, n := range []string{caName, certName, keyName} {
		q.Del(n)
	}
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	if tlsScheme != "" && u.Scheme != tlsScheme {
		return nil, fmt.Errorf("%w: %s: %s, %s and %s need %s://", locker.ErrBadURL, u.Redacted(), caName, certName, keyName, tlsScheme)
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("%w: %s: %s and %s go together", locker.ErrBadURL, u.Redacted(), certName, keyName)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s: %v", locker.ErrBadURL, u.Redacted(), caName, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s: %s: no PEM certificate in %s", locker.ErrBadURL, u.Redacted(), caName, ca)
		}
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s/%s: %v", locker.ErrBadURL, u.Redacted(), certName, keyName, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// takeBool takes the boolean parameter name out of q (false when absent).
func takeBool(u *url.URL, q url.Values, name string) (bool, error) {
	if !q.Has(name) {
		return false, nil
	}
	v, err := strconv.ParseBool(q.Get(name))
	if err != nil {
		return false, fmt.Errorf("%w: %s: parameter %s=%q is not a boolean", locker.ErrBadURL, u.Redacted(), name, q.Get(name))
	}
	q.Del(name)
	return v, nil
}

// cleartextPassword refuses a URL that would send its password in
// cleartext (secure says the connection uses TLS) to a host that is not
// this machine (localhost or a literal loopback address), unless the caller
// said insecure (parameter insecure=true).
func cleartextPassword(u *url.URL, hs []string, secure, insecure bool) error {
	if u.User == nil || secure || insecure {
		return nil
	}
	if _, hasPassword := u.User.Password(); !hasPassword {
		return nil
	}
	for _, h := range hs {
		if !loopback(h) {
			return fmt.Errorf("%w: %s: refusing to send the password in cleartext to %s: use TLS, or add insecure=true", locker.ErrBadURL, u.Redacted(), h)
		}
	}
	return nil
}

// loopback reports whether host (host or host:port) is this machine:
// localhost or a literal loopback address. Other names are not resolved.
func loopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
