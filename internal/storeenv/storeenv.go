// Package storeenv gives the tests inside a backend's module the server
// that the environment names. Those tests are white-box tests of the
// backend's store code (scripts, key names, protocol details) and examples;
// they need the standard library only, so that no test dependency enters the
// go.mod a user's build reads.
//
// `make test` starts the servers with the test harness (an endpoint from the
// environment, testcontainers-go when a Docker engine answers, or a server
// binary on a free loopback port: see internal/testenv) and runs these tests
// with the variables below set. Run by hand, set them yourself, for example
// LOCKER_REDIS_ADDR=127.0.0.1:6379 go test ./redis/... Without them the
// tests are skipped, and fail when the environment variable CI is true.
//
// Tests that need servers of their own (restarts, TLS, partitions through a
// proxy, a Cluster the test restarts) and every black-box test live in the
// integration module, which uses the harness directly.
package storeenv

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/golocker/locker/internal/leakcheck"
)

// The environment variables naming the servers; the harness reads the same
// ones as its first source.
const (
	// RedisAddr names a Redis server (host:port).
	RedisAddr = "LOCKER_REDIS_ADDR"
	// RedisClusterAddrs names the nodes (comma-separated host:port) of a
	// Redis Cluster.
	RedisClusterAddrs = "LOCKER_REDIS_CLUSTER_ADDRS"
	// MySQLDSN is a go-sql-driver DSN of a MySQL or MariaDB account that
	// may create databases.
	MySQLDSN = "LOCKER_MYSQL_DSN"
	// PostgresURL is a connection URL (postgres://…) of a PostgreSQL
	// database.
	PostgresURL = "LOCKER_POSTGRES_URL"
	// EtcdEndpoints names the endpoints (comma-separated) of an etcd
	// cluster.
	EtcdEndpoints = "LOCKER_ETCD_ENDPOINTS"
	// ZooKeeperServers names the servers (comma-separated host:port) of a
	// ZooKeeper ensemble.
	ZooKeeperServers = "LOCKER_ZK_SERVERS"
	// Started lists (comma-separated) the variables above whose servers
	// withstores started for this run, as opposed to ones the user named.
	Started = "LOCKER_WITHSTORES_STARTED"
)

// StartedByWithstores reports whether the server that the variable env
// names was started by withstores for this run: a throwaway server of the
// harness, not one the user pointed the tests at.
func StartedByWithstores(env string) bool {
	for _, s := range List(Started) {
		if s == env {
			return true
		}
	}
	return false
}

// Server is a server the environment named.
type Server struct{ addrs []string }

// Addr returns the first address (a DSN for MySQL).
func (s *Server) Addr() string { return s.addrs[0] }

// Addrs returns every address.
func (s *Server) Addrs() []string { return s.addrs }

// Redis returns the Redis server of [RedisAddr].
func Redis(t testing.TB) *Server { t.Helper(); return need(t, RedisAddr) }

// RedisCluster returns the Redis Cluster of [RedisClusterAddrs].
func RedisCluster(t testing.TB) *Server { t.Helper(); return need(t, RedisClusterAddrs) }

// MySQL returns the MySQL server of [MySQLDSN] (Addr is the DSN).
func MySQL(t testing.TB) *Server { t.Helper(); return need(t, MySQLDSN) }

// Postgres returns the PostgreSQL database of [PostgresURL] (Addr is the
// URL).
func Postgres(t testing.TB) *Server { t.Helper(); return need(t, PostgresURL) }

// Etcd returns the etcd cluster of [EtcdEndpoints].
func Etcd(t testing.TB) *Server { t.Helper(); return need(t, EtcdEndpoints) }

// ZooKeeper returns the ZooKeeper ensemble of [ZooKeeperServers].
func ZooKeeper(t testing.TB) *Server { t.Helper(); return need(t, ZooKeeperServers) }

// List returns the comma-separated entries of the environment variable
// name, blanks dropped; nil when it is unset.
func List(name string) []string {
	var out []string
	for _, s := range strings.Split(os.Getenv(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// CI reports whether the environment variable CI is true: a server that
// cannot be had is then a failure, never a skip.
func CI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

func need(t testing.TB, name string) *Server {
	t.Helper()
	addrs := List(name)
	if len(addrs) == 0 {
		msg := missing(name)
		if CI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return &Server{addrs: addrs}
}

func missing(name string) string {
	return fmt.Sprintf("%s is not set: run `make test`, which starts the servers, or set it to a server of your own", name)
}

// Main runs m's tests, and then checks that no goroutine outlived them. The
// package's Example functions need the servers of the variables names: when
// one is unset, they are skipped (Example functions cannot skip
// themselves), or the run fails under CI. Use it from TestMain:
//
//	func TestMain(m *testing.M) { storeenv.Main(m, storeenv.RedisAddr) }
func Main(m *testing.M, names ...string) {
	for _, name := range names {
		if len(List(name)) > 0 {
			continue
		}
		if CI() {
			fmt.Fprintf(os.Stderr, "storeenv: the examples need a server: %s\n", missing(name))
			os.Exit(1)
		}
		flag.Parse()
		fmt.Fprintf(os.Stderr, "storeenv: skipping the examples: %s\n", missing(name))
		_ = flag.Set("test.skip", "^Example")
	}
	leakcheck.Main(m)
}
