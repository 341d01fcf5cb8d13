package testenv

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/golocker/locker/internal/freeport"
	"github.com/golocker/locker/internal/leakcheck"
	"github.com/golocker/locker/internal/storeenv"
)

// Environment variables read by this package.
const (
	// EnvRedisAddr names a Redis server (host:port) to use instead of
	// starting one.
	EnvRedisAddr = storeenv.RedisAddr
	// EnvRedisClusterAddrs names the nodes (comma-separated host:port) of a
	// Redis Cluster to use instead of starting one.
	EnvRedisClusterAddrs = storeenv.RedisClusterAddrs
	// EnvMySQLDSN is a go-sql-driver DSN of a MySQL or MariaDB server to use
	// instead of starting one.
	EnvMySQLDSN = storeenv.MySQLDSN
	// EnvPostgresURL is a connection URL of a PostgreSQL database to use
	// instead of starting a server.
	EnvPostgresURL = storeenv.PostgresURL
	// EnvPostgresBin names the directory of initdb and postgres when they
	// are not on PATH (default /usr/lib/postgresql/15/bin, Debian's; set
	// empty, none).
	EnvPostgresBin = "LOCKER_POSTGRES_BIN"
	// EnvEtcdEndpoints names the endpoints (comma-separated) of an etcd
	// cluster.
	EnvEtcdEndpoints = storeenv.EtcdEndpoints
	// EnvZooKeeperServers names the servers (comma-separated host:port) of a
	// ZooKeeper ensemble to use instead of starting one.
	EnvZooKeeperServers = storeenv.ZooKeeperServers
	// EnvNoDocker, when true, skips the Docker step.
	EnvNoDocker = "LOCKER_NO_DOCKER"
	// EnvTestenv, when set, makes every provisioner use one way only, and
	// fail (even outside CI) saying why when that way cannot serve: "env"
	// (the endpoint variables), "docker" (containers; the endpoint variables
	// are ignored) or "binary" (server binaries; the endpoint variables and
	// Docker are ignored). Unset, the package doc's order applies.
	EnvTestenv = "LOCKER_TESTENV"
	// EnvDockerNetwork selects the network of containers: "bridge" (the
	// default: Docker's bridge network, ports published on 127.0.0.1) or
	// "host" (Linux: the host's network, servers listening on free ports of
	// 127.0.0.1, for engines started with --bridge=none).
	EnvDockerNetwork = "LOCKER_DOCKER_NETWORK"
)

// Bounds of the startup waits.
const (
	readyTimeout     = 30 * time.Second
	containerTimeout = 3 * time.Minute
	stopTimeout      = 10 * time.Second
)

// CI reports whether the tests run under continuous integration, that is
// whether the environment variable CI is true ("true", "1", ...). Under CI an
// unavailable server fails the test instead of skipping it.
func CI() bool { return storeenv.CI() }

// Unavailable ends the test because the server what cannot be had: it fails
// the test (t.Fatalf) under [CI] and skips it (t.Skipf) elsewhere. The
// message states err and installCmd, the command that installs the server.
func Unavailable(t testing.TB, what, installCmd string, err error) {
	t.Helper()
	msg := fmt.Sprintf("testenv: %s unavailable: %v\n\tinstall it with: %s", what, err, installCmd)
	if CI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// below the kernel's ephemeral range when it leaves room (so a stopped
// server's port cannot become another connection's local port before its
// restart). Another process may take it before the caller binds it;
// provisioners that use it retry with another port when a server fails to
// start.
func FreePort() (int, error) {
	return freeport.Port()
}

// EtcdEndpoints returns the endpoints listed in LOCKER_ETCD_ENDPOINTS and
// whether the variable named any. This package does not start etcd: without
// the variable, etcd tests run an embedded server.
func EtcdEndpoints() ([]string, bool) {
	eps := storeenv.List(EnvEtcdEndpoints)
	return eps, len(eps) > 0
}

// unavailableError means a server cannot be had on this machine (nothing
// configured, no Docker, no binary); it skips the test outside CI. Every other
// provisioning error fails the test.
type unavailableError struct {
	what    string
	install string
	err     error
}

func (e *unavailableError) Error() string { return e.what + ": " + e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// report ends the test because of a provisioning error.
func report(t testing.TB, err error) {
	t.Helper()
	var ue *unavailableError
	if errors.As(err, &ue) {
		Unavailable(t, ue.what, ue.install, ue.err)
		return
	}
	t.Fatalf("testenv: %v", err)
}

// registry holds the servers started once per test binary. It is the only
// package-level state: a test binary has one set of shared servers, stopped
// by Shutdown.
var registry = struct {
	mu      sync.Mutex
	entries map[string]*sharedEntry
}{entries: map[string]*sharedEntry{}}

// sharedEntry is one shared server: started once, its outcome (value or
// error) remembered until Shutdown, so a failing server is not retried by
// every test.
type sharedEntry struct {
	once sync.Once
	val  any
	stop func()
	err  error
}

// shared returns the server registered under key, starting it with start on
// first use. start runs outside the registry lock, so different servers start
// in parallel; callers of the same key wait for the first.
func shared[T any](key string, start func() (T, func(), error)) (T, error) {
	registry.mu.Lock()
	e := registry.entries[key]
	if e == nil {
		e = &sharedEntry{}
		registry.entries[key] = e
	}
	registry.mu.Unlock()

	e.once.Do(func() {
		v, stop, err := start()
		e.val, e.stop, e.err = v, stop, err
	})
	if e.err != nil {
		var zero T
		return zero, e.err
	}
	return e.val.(T), nil
}

// Shutdown stops every shared server started by this test binary and removes
// its temporary directory. Call it from TestMain after m.Run (or use [Main]).
// It is safe to call more than once; a later provisioner call starts a new
// server.
func Shutdown() {
	registry.mu.Lock()
	entries := registry.entries
	registry.entries = map[string]*sharedEntry{}
	registry.mu.Unlock()

	var wg sync.WaitGroup
	for _, e := range entries {
		wg.Go(func() {
			e.once.Do(func() {}) // wait for a start in progress
			if e.stop != nil {
				e.stop()
			}
		})
	}
	wg.Wait()
}

// Main runs the tests, stops the shared servers, fails the run when
// goroutines outlived the tests (every Locker, client and proxy must be
// closed by then), and exits with the tests' exit code:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) { MainWith(m, nil) }

// Parallel raises the number of tests that run at once (-test.parallel,
// GOMAXPROCS by default) to n, unless the command line set it. Call it in
// TestMain before [Main], in packages whose parallel tests spend their time
// waiting on the servers' clocks (expiries, TTLs, backoffs) rather than
// computing: on a 2-core machine two at a time leaves the cores mostly idle.
func Parallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n)) // defined by package testing
	}
}

// MainWith is [Main] for packages that run servers of their own: after the
// run, stop (when not nil) stops them, before the leak check.
func MainWith(m *testing.M, stop func()) {
	code := m.Run()
	if stop != nil {
		stop()
	}
	Shutdown()
	os.Exit(leakcheck.Code(code))
}
