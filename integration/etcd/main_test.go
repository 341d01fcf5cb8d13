// Package etcd_test holds the etcd tests that need servers of their own or
// see the backend from outside: the conformance suite (partitions through
// proxies), a three-member cluster, leases and revisions, and the
// benchmarks. They run against embedded etcd servers. The examples stay
// beside the code, in the etcd module (see internal/storeenv).
package etcd_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/golocker/locker/internal/etcdserver"
	"github.com/golocker/locker/internal/testenv"
)

// TestMain runs 4 parallel tests at once (the conformance cases mostly wait
// for expiries and backoffs), stops the shared embedded etcd and checks that
// no goroutine of ours outlives the tests.
func TestMain(m *testing.M) {
	testenv.Parallel(4)
	testenv.MainWith(m, embedded.close)
}

// embedded is the single-member etcd shared by the backend tests and the
// examples of this test binary, started on first use.
var embedded sharedServer

type sharedServer struct {
	once sync.Once
	srv  *etcdserver.Server
	err  error
}

func (s *sharedServer) get() (*etcdserver.Server, error) {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.srv, s.err = etcdserver.Start(ctx, etcdserver.Config{})
	})
	return s.srv, s.err
}

func (s *sharedServer) close() {
	if s.srv != nil {
		s.srv.Close()
	}
}

// sharedEtcd returns the endpoints of the shared embedded etcd.
func sharedEtcd(tb testing.TB) []string {
	tb.Helper()
	srv, err := embedded.get()
	if err != nil {
		tb.Fatalf("embedded etcd: %v", err)
	}
	return srv.Endpoints()
}

// startEtcd starts an embedded etcd for one test, closed when it ends.
func startEtcd(tb testing.TB, cfg etcdserver.Config) *etcdserver.Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := etcdserver.Start(ctx, cfg)
	if err != nil {
		tb.Fatalf("embedded etcd: %v", err)
	}
	tb.Cleanup(func() { srv.Close() })
	return srv
}

// envEtcd returns the endpoints of LOCKER_ETCD_ENDPOINTS, or skips.
func envEtcd(tb testing.TB) []string {
	tb.Helper()
	eps, ok := testenv.EtcdEndpoints()
	if !ok {
		tb.Skipf("%s is not set: no external etcd to test against", testenv.EnvEtcdEndpoints)
	}
	return eps
}

// clientConfig is the client configuration of the tests: quiet, bounded
// dials.
func clientConfig(eps []string) clientv3.Config {
	return clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
}

// newClient returns a client of eps, closed when the test ends.
func newClient(tb testing.TB, eps []string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientConfig(eps))
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// hostOf returns the host:port of an endpoint URL (or the endpoint itself).
func hostOf(ep string) string {
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		return u.Host
	}
	return ep
}
