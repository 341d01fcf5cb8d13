package backends_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker"
	"github.com/golocker/locker/internal/etcdserver"
	"github.com/golocker/locker/internal/testenv"
)

// testCA is a private certificate authority for TLS tests, made with
// crypto/x509 and written as PEM files in a temporary directory.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "locker test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key}
	ca.write(t, "ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// issue makes a certificate for 127.0.0.1 (server and client use) and
// returns its and its key's file paths.
func (ca *testCA) issue(t *testing.T, name string, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.write(t, name+".pem", "CERTIFICATE", der), ca.write(t, name+"-key.pem", "EC PRIVATE KEY", kder)
}

// TestEtcdTLSByURL: etcds:// with cacert, cert and key reaches an etcd that
// serves clients over TLS and requires client certificates (mTLS); without
// the client certificate it fails within the Open ctx, and the error names
// the https endpoint.
func TestEtcdTLSByURL(t *testing.T) {
	t.Parallel() // a server of its own
	ca := newTestCA(t)
	serverCert, serverKey := ca.issue(t, "server", 2)
	clientCert, clientKey := ca.issue(t, "client", 3)
	srv, err := etcdserver.Start(t.Context(), etcdserver.Config{ClientTLS: &etcdserver.TLSFiles{
		CertFile: serverCert, KeyFile: serverKey, TrustedCAFile: filepath.Join(ca.dir, "ca.pem"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	host := strings.TrimPrefix(srv.Endpoint(), "https://")
	m := newMux(t)
	q := "?ttl=3s&dial_timeout=10s&cacert=" + filepath.Join(ca.dir, "ca.pem")
	exercise(t, m, "etcds://"+host+q+"&cert="+clientCert+"&key="+clientKey)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	l, err := locker.Open(ctx, m, "etcds://"+host+q+"&dial_timeout=1s")
	if err == nil {
		_ = l.Close()
		t.Fatal("etcds:// without a client certificate must fail against a server that requires one")
	}
	if !strings.Contains(err.Error(), "https://"+host) {
		t.Errorf("the error must name the endpoint and say it used TLS: %v", err)
	}
	for _, bad := range []string{"etcd://" + host + "?cacert=x", "etcds://" + host + "?cert=" + clientCert} {
		if l, err := locker.Open(ctx, m, bad); err == nil {
			_ = l.Close()
			t.Errorf("Open(%q) must fail", bad)
		}
	}
}

// TestRedisTLSByURL: rediss:// with ca_file, cert_file and key_file reaches
// a redis-server over TLS with a private CA; without ca_file the server's
// certificate is not trusted and Open fails.
func TestRedisTLSByURL(t *testing.T) {
	t.Parallel() // a server of its own
	ca := newTestCA(t)
	serverCert, serverKey := ca.issue(t, "redis-server", 2)
	clientCert, clientKey := ca.issue(t, "redis-client", 3)
	srv := testenv.NewRedisTLS(t, testenv.TLSFiles{CertFile: serverCert, KeyFile: serverKey, CAFile: filepath.Join(ca.dir, "ca.pem")})
	m := newMux(t)
	base := "rediss://" + srv.TLSAddr() + "/0?ttl=3s"
	exercise(t, m, base+"&ca_file="+filepath.Join(ca.dir, "ca.pem")+"&cert_file="+clientCert+"&key_file="+clientKey)
	exercise(t, m, base+"&ca_file="+filepath.Join(ca.dir, "ca.pem"))

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if l, err := locker.Open(ctx, m, base); err == nil {
		_ = l.Close()
		t.Error("rediss:// to a server whose CA is not trusted must fail")
	}
	for _, bad := range []string{
		"redis://" + srv.Addr() + "?ca_file=" + filepath.Join(ca.dir, "ca.pem"),
		base + "&cert_file=" + clientCert,
		base + "&ca_file=" + filepath.Join(ca.dir, "missing.pem"),
	} {
		if l, err := locker.Open(ctx, m, bad); err == nil || !errors.Is(err, locker.ErrBadURL) {
			if l != nil {
				_ = l.Close()
			}
			t.Errorf("Open(%q) = %v; want an error matching ErrBadURL", bad, err)
		}
	}
}

// TestMySQLTLSByURL: mysql:// with ca_file, cert_file and key_file reaches
// MariaDB over TLS with a private CA, as an account that may only connect
// with a client certificate (REQUIRE X509).
func TestMySQLTLSByURL(t *testing.T) {
	t.Parallel() // a server of its own
	ca := newTestCA(t)
	serverCert, serverKey := ca.issue(t, "mariadb", 2)
	clientCert, clientKey := ca.issue(t, "mariadb-client", 3)
	srv := testenv.NewMySQLTLS(t, testenv.TLSFiles{CertFile: serverCert, KeyFile: serverKey, CAFile: filepath.Join(ca.dir, "ca.pem")})
	cfg, err := gomysql.ParseDSN(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	// An account that may only connect over TLS with a client certificate.
	admin, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, stmt := range []string{
		"CREATE USER 'tlsuser'@'%' IDENTIFIED BY 'pw' REQUIRE X509",
		"GRANT ALL ON " + cfg.DBName + ".* TO 'tlsuser'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	m := newMux(t)
	base := "mysql://tlsuser:pw@" + cfg.Addr + "/" + cfg.DBName + "?ttl=3s"
	exercise(t, m, base+"&ca_file="+filepath.Join(ca.dir, "ca.pem")+"&cert_file="+clientCert+"&key_file="+clientKey)
	if l, err := locker.Open(ctx, m, base+"&ca_file="+filepath.Join(ca.dir, "ca.pem")); err == nil {
		_ = l.Close()
		t.Error("without a client certificate the REQUIRE X509 account must be refused")
	}
	bad := "mysql://" + cfg.User + "@" + cfg.Addr + "/" + cfg.DBName + "?cert_file=" + clientCert
	if l, err := locker.Open(ctx, m, bad); !errors.Is(err, locker.ErrBadURL) {
		if l != nil {
			_ = l.Close()
		}
		t.Errorf("Open(%q) = %v; want an error matching ErrBadURL", bad, err)
	}
}
