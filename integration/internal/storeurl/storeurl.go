// Package storeurl gives the locker URL (see locker.Open) of a real server
// of every backend that works across processes, for the integration tests
// that open Lockers by URL or run programs that do. Servers come from
// internal/testenv; etcd is the one LOCKER_ETCD_ENDPOINTS names (make test's,
// outside the race-enabled test binary), else an embedded server started
// once per test binary, which [Stop] stops (call it from TestMain, as
// testenv.MainWith's stop).
package storeurl

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/internal/etcdserver"
	"github.com/golocker/locker/internal/testenv"
)

// Backend is one backend and how to get the URL of a server of it.
type Backend struct {
	Name string
	URL  func(t *testing.T) string
}

// Backends are redis, mysql (a database of the test's own), etcd and
// zookeeper.
var Backends = []Backend{
	{Name: "redis", URL: func(t *testing.T) string { return "redis://" + testenv.Redis(t).Addr() }},
	{Name: "mysql", URL: func(t *testing.T) string {
		cfg, err := gomysql.ParseDSN(testenv.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("mysql://%s:%s@%s/%s", cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName)
	}},
	{Name: "etcd", URL: etcdURL},
	{Name: "zookeeper", URL: func(t *testing.T) string { return "zk://" + strings.Join(testenv.ZooKeeper(t).Servers(), ",") }},
}

// etcd is the embedded etcd server of this test binary.
var etcd struct {
	sync.Once
	srv *etcdserver.Server
	err error
}

func etcdURL(t *testing.T) string {
	if eps, ok := testenv.EtcdEndpoints(); ok {
		return "etcd://" + strings.Join(hosts(eps), ",")
	}
	etcd.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		etcd.srv, etcd.err = etcdserver.Start(ctx, etcdserver.Config{})
	})
	if etcd.err != nil {
		t.Fatalf("embedded etcd: %v", etcd.err)
	}
	return "etcd://" + strings.Join(hosts(etcd.srv.Endpoints()), ",")
}

// hosts are endpoints without their scheme (http://).
func hosts(endpoints []string) []string {
	hs := make([]string, len(endpoints))
	for i, ep := range endpoints {
		if _, h, ok := strings.Cut(ep, "://"); ok {
			ep = h
		}
		hs[i] = ep
	}
	return hs
}

// Stop stops the embedded etcd server if one was started.
func Stop() {
	if etcd.srv != nil {
		etcd.srv.Close()
	}
}
