// Package stores gives the integration tests a locker URL for each real
// backend's test server (see internal/testenv), so that a test can open the
// same store from its own process and from child processes.
package stores

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

// Backend names a store and makes a URL that reaches its test server.
type Backend struct {
	Name string
	URL  func(t testing.TB) string
}

// Remote is every backend reachable by URL from another process: Redis,
// MySQL (a fresh database per call), etcd (one embedded server per test
// binary, stopped by [StopEtcd]) and ZooKeeper.
var Remote = []Backend{
	{Name: "redis", URL: func(t testing.TB) string { return "redis://" + testenv.Redis(t).Addr() }},
	{Name: "mysql", URL: mysqlURL},
	{Name: "etcd", URL: etcdURL},
	{Name: "zookeeper", URL: func(t testing.TB) string { return "zk://" + strings.Join(testenv.ZooKeeper(t).Servers(), ",") }},
}

func mysqlURL(t testing.TB) string {
	cfg, err := gomysql.ParseDSN(testenv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("mysql://%s:%s@%s/%s", cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName)
}

var etcdOnce struct {
	sync.Once
	srv *etcdserver.Server
	err error
}

func etcdURL(t testing.TB) string {
	etcdOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		etcdOnce.srv, etcdOnce.err = etcdserver.Start(ctx, etcdserver.Config{})
	})
	if etcdOnce.err != nil {
		t.Fatalf("embedded etcd: %v", etcdOnce.err)
	}
	var hosts []string
	for _, ep := range etcdOnce.srv.Endpoints() {
		hosts = append(hosts, ep[strings.Index(ep, "://")+3:])
	}
	return "etcd://" + strings.Join(hosts, ",")
}

// StopEtcd stops the embedded etcd server if one was started: pass it to
// testenv.MainWith.
func StopEtcd() {
	if etcdOnce.srv != nil {
		etcdOnce.srv.Close()
	}
}
