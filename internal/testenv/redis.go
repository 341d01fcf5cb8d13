package testenv

import (
	"context"
	"fmt"
	"github.com/golocker/locker/internal/storeenv"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/testcontainers/testcontainers-go"
)

const (
	redisInstall        = "apt-get install -y redis-server"
	redisClusterInstall = "apt-get install -y redis-server redis-tools"
	redisImage          = "redis:7"
	// clusterNodes is the number of masters in a test cluster.
	clusterNodes = 3
)

// RedisServer is a Redis server for tests. Its methods are safe for
// concurrent use.
type RedisServer struct {
	addr    string
	tlsAddr string // "" without TLS
	origin  string // where the server came from, for messages

	ps procSet // empty unless started from a binary
}

// Addr returns the server's address, host:port.
func (s *RedisServer) Addr() string { return s.addr }

// TLSAddr returns the address of the server's TLS port, or "" when it has
// none (see [NewRedisTLS]).
func (s *RedisServer) TLSAddr() string { return s.tlsAddr }

// TLSFiles names the PEM files of a TLS endpoint: the server's certificate
// and key, and the CA whose client certificates it accepts.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// NewRedisTLS returns a redis-server for this test only that also serves
// TLS on [RedisServer.TLSAddr] with files (client certificates optional,
// checked against files.CAFile when given). It needs the redis-server
// binary (built with TLS, as Debian's is): the environment and Docker
// cannot provide one.
func NewRedisTLS(t testing.TB, files TLSFiles) *RedisServer {
	t.Helper()
	return dedicatedBinary(t, "redis (TLS)", redisInstall, []string{"redis-server"}, func(p []string) (*RedisServer, func(), error) {
		return redisBinary(p[0], &files)
	})
}

// Restart stops the server and starts it again on the same address with an
// empty dataset; it returns when the server answers again. Clients see their
// connections closed and, while it restarts, connections refused. Only a
// server started from a binary can be restarted: otherwise Restart skips the
// test.
//
// Restarting a shared server ([Redis]) disturbs every test using it; tests
// that restart should use [NewRedis] instead.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	s.ps.restart(t, fmt.Sprintf("the redis server at %s from %s", s.addr, s.origin),
		[]func(context.Context) error{func(ctx context.Context) error { return redisPing(ctx, s.addr) }}, nil)
}

// Redis returns the Redis server shared by the tests of this test binary,
// starting it on first use (see the package doc for where it comes from).
// It skips or fails the test when no server can be had.
func Redis(t testing.TB) *RedisServer {
	t.Helper()
	return sharedServer(t, "redis", startRedis)
}

// NewRedis returns a Redis server of this test's own, which it may restart,
// stopped when the test ends (see [ownServer]).
func NewRedis(t testing.TB) *RedisServer {
	t.Helper()
	return ownServer(t, redisSource())
}

// startRedis finds a Redis server: from the environment, Docker or a binary.
func startRedis() (*RedisServer, func(), error) { return redisSource().provision() }

// redisSource is the ways to a Redis server.
func redisSource() source[*RedisServer] {
	return source[*RedisServer]{
		what: "redis", env: EnvRedisAddr, install: redisInstall,
		fromEnv: func(addr string) (*RedisServer, func(), error) {
			if err := dialCheck(addr); err != nil {
				return nil, nil, fmt.Errorf("redis from %s: %w", EnvRedisAddr, err)
			}
			return &RedisServer{addr: addr, origin: EnvRedisAddr}, func() {}, nil
		},
		container: redisContainer,
		binaries:  func() ([]string, error) { return lookPaths("redis-server") },
		start:     func(p []string) (*RedisServer, func(), error) { return redisBinary(p[0], nil) },
	}
}

// redisArgs are the arguments of a throw-away redis-server on port in dir.
func redisArgs(port int, dir string, extra ...string) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--maxclients", "10000",
	}
	return append(args, extra...)
}

// startRedisNode starts one redis-server of a multi-process setup (a
// Cluster node, a Sentinel deployment's primary, replica or sentinel) in a
// directory of its own under dir, on nports free ports (the first one its
// client port), with the arguments args returns for those ports and that
// directory, and returns once it answers PING.
func startRedisNode(ctx context.Context, server, dir, name string, nports int, args func(ports []int, dir string) ([]string, error)) (*process, string, error) {
	var p *process
	var addr string
	err := retryPorts(nports, func(ports []int) error {
		d := filepath.Join(dir, name+"-"+strconv.Itoa(ports[0]))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		a, err := args(ports, d)
		if err != nil {
			return err
		}
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		p = newProcess(name, server, d, a...)
		return startReady(ctx, p, func(ctx context.Context) error { return redisPing(ctx, addr) })
	})
	return p, addr, err
}

// redisBinary starts redis-server on a free port in a temporary directory.
func redisBinary(path string, tls *TLSFiles) (*RedisServer, func(), error) {
	dir, err := tempDir("redis")
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var s *RedisServer
	err = retryPorts(2, func(ports []int) error {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		var extra []string
		tlsAddr := ""
		if tls != nil {
			tlsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
			extra = []string{"--tls-port", strconv.Itoa(ports[1]),
				"--tls-cert-file", tls.CertFile, "--tls-key-file", tls.KeyFile, "--tls-ca-cert-file", tls.CAFile,
				"--tls-auth-clients", "optional"}
		}
		p := newProcess("redis-server", path, dir, redisArgs(ports[0], dir, extra...)...)
		if err := startReady(ctx, p, func(ctx context.Context) error { return redisPing(ctx, addr) }); err != nil {
			return err
		}
		s = &RedisServer{addr: addr, tlsAddr: tlsAddr, origin: path, ps: newProcSet(p)}
		return nil
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() {
		s.ps.stop()
		_ = os.RemoveAll(dir)
	}
	return s, stop, nil
}

// redisContainer runs redis:7 in Docker.
func redisContainer() (*RedisServer, func(), error) {
	addrs, c, err := startContainer(containerSpec{
		image:   redisImage,
		nports:  1,
		publish: 1,
		opts: func(ports []int, loopback bool) []testcontainers.ContainerCustomizer {
			cmd := []string{"redis-server", "--port", strconv.Itoa(ports[0]),
				"--save", "", "--appendonly", "no", "--protected-mode", "no"}
			if loopback {
				cmd = append(cmd, "--bind", "127.0.0.1")
			}
			return []testcontainers.ContainerCustomizer{testcontainers.WithCmd(cmd...)}
		},
		ready:       func(ctx context.Context, addrs []string) error { return redisPing(ctx, addrs[0]) },
		readyWithin: readyTimeout,
	})
	if err != nil {
		return nil, nil, err
	}
	s := &RedisServer{addr: addrs[0], origin: "docker " + redisImage, ps: containerSet(c)}
	return s, s.ps.stop, nil
}

// RedisClusterServer is a Redis Cluster of three masters (no replicas) for
// tests. Its methods are safe for concurrent use.
type RedisClusterServer struct {
	addrs  []string
	origin string

	ps procSet // empty unless started from binaries
}

// Restart stops every node and starts them again on the same addresses with
// their cluster configuration and empty datasets, like a cluster-wide
// restart without persistence; it returns once every node reports
// cluster_state:ok again. Only a cluster started from binaries can be
// restarted: otherwise Restart skips the test.
//
// Restarting the shared cluster ([RedisCluster]) disturbs every test using
// it; tests that restart should use [NewRedisCluster] instead.
func (s *RedisClusterServer) Restart(t testing.TB) {
	t.Helper()
	var probes, settle []func(context.Context) error
	for _, addr := range s.addrs {
		probes = append(probes, func(ctx context.Context) error { return redisPing(ctx, addr) })
		settle = append(settle, func(ctx context.Context) error { return clusterReady(ctx, addr, clusterNodes) })
	}
	s.ps.restart(t, fmt.Sprintf("the redis cluster at %v from %s", s.addrs, s.origin), probes, settle)
}

// NewRedisCluster returns a Redis Cluster of this test's own, which it may
// restart, stopped when the test ends (see [ownServer]).
func NewRedisCluster(t testing.TB) *RedisClusterServer {
	t.Helper()
	return ownServer(t, redisClusterSource())
}

// Addrs returns the addresses (host:port) of the cluster's nodes; any of
// them is a valid seed for a cluster client. The caller may modify the
// returned slice.
func (s *RedisClusterServer) Addrs() []string { return append([]string(nil), s.addrs...) }

// RedisCluster returns the Redis Cluster shared by the tests of this test
// binary, starting it on first use: from LOCKER_REDIS_CLUSTER_ADDRS, else one
// redis:7 container running three nodes, else three redis-server processes
// joined with redis-cli --cluster create. It returns once every node reports
// cluster_state:ok with all slots assigned. It skips or fails the test when
// no cluster can be had.
func RedisCluster(t testing.TB) *RedisClusterServer {
	t.Helper()
	return sharedServer(t, "redis-cluster", startRedisCluster)
}

// startRedisCluster finds a Redis Cluster: from the environment, Docker or
// binaries.
func startRedisCluster() (*RedisClusterServer, func(), error) {
	return redisClusterSource().provision()
}

// redisClusterSource is the ways to a Redis Cluster.
func redisClusterSource() source[*RedisClusterServer] {
	return source[*RedisClusterServer]{
		what: "redis cluster", env: EnvRedisClusterAddrs, install: redisClusterInstall,
		fromEnv: func(v string) (*RedisClusterServer, func(), error) {
			addrs := storeenv.List(EnvRedisClusterAddrs)
			if err := dialCheck(addrs...); err != nil {
				return nil, nil, fmt.Errorf("redis cluster from %s: %w", EnvRedisClusterAddrs, err)
			}
			return &RedisClusterServer{addrs: addrs, origin: EnvRedisClusterAddrs}, func() {}, nil
		},
		container: redisClusterContainer,
		binaries:  func() ([]string, error) { return lookPaths("redis-server", "redis-cli") },
		start: func(p []string) (*RedisClusterServer, func(), error) {
			return redisClusterBinary(p[0], p[1])
		},
	}
}

// redisClusterBinary starts three cluster-enabled redis-server processes,
// each with its own cluster bus port, and joins them.
func redisClusterBinary(server, cli string) (*RedisClusterServer, func(), error) {
	dir, err := tempDir("redis-cluster")
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()

	var procs []*process
	fail := func(err error) (*RedisClusterServer, func(), error) {
		stopAll(procs)
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}

	addrs := make([]string, clusterNodes)
	for i := range clusterNodes {
		p, addr, err := startRedisNode(ctx, server, dir, "redis-server", 2, func(ports []int, nodeDir string) ([]string, error) {
			return redisArgs(ports[0], nodeDir,
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
				"--cluster-port", strconv.Itoa(ports[1]),
				"--cluster-node-timeout", "5000",
			), nil
		})
		if err != nil {
			return fail(fmt.Errorf("redis cluster node %d: %w", i, err))
		}
		procs = append(procs, p)
		addrs[i] = addr
	}

	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if err := runTool(ctx, dir, cli, args...); err != nil {
		return fail(fmt.Errorf("redis cluster: %w", err))
	}
	for i, addr := range addrs {
		if err := waitReady(ctx, procs[i], func(ctx context.Context) error { return clusterReady(ctx, addr, clusterNodes) }); err != nil {
			return fail(fmt.Errorf("redis cluster: %w", err))
		}
	}
	s := &RedisClusterServer{addrs: addrs, origin: server, ps: newProcSet(procs...)}
	return s, func() {
		s.ps.stop()
		_ = os.RemoveAll(dir)
	}, nil
}

// redisClusterContainer runs the three nodes in one redis:7 container. Each
// node listens on the same port inside the container as on the host (with
// its cluster bus on a port of its own) and announces 127.0.0.1, so the
// addresses the nodes give clients (in MOVED replies and CLUSTER SLOTS) work
// from the host. The script's last command waits forever; the container's
// init process ends it when the container stops.
func redisClusterContainer() (*RedisClusterServer, func(), error) {
	addrs, c, err := startContainer(containerSpec{
		image:   redisImage,
		nports:  2 * clusterNodes, // clients', then buses'
		publish: clusterNodes,
		opts: func(ports []int, loopback bool) []testcontainers.ContainerCustomizer {
			var script strings.Builder
			var nodes []string
			for i, p := range ports[:clusterNodes] {
				nodes = append(nodes, "127.0.0.1:"+strconv.Itoa(p))
				bind := ""
				if loopback {
					bind = " --bind 127.0.0.1"
				}
				fmt.Fprintf(&script, "redis-server --port %d --cluster-port %d%s --protected-mode no --save '' --appendonly no "+
					"--cluster-enabled yes --cluster-config-file /tmp/nodes-%d.conf --cluster-node-timeout 5000 "+
					"--cluster-announce-ip 127.0.0.1 --dir /tmp --daemonize yes\n", p, ports[clusterNodes+i], bind, p)
				fmt.Fprintf(&script, "until redis-cli -p %d ping >/dev/null 2>&1; do sleep 0.1; done\n", p)
			}
			fmt.Fprintf(&script, "redis-cli --cluster create %s --cluster-replicas 0 --cluster-yes\n", strings.Join(nodes, " "))
			script.WriteString("exec sleep infinity\n")
			return []testcontainers.ContainerCustomizer{testcontainers.WithEntrypoint("sh", "-c", script.String())}
		},
		ready: func(ctx context.Context, addrs []string) error {
			for _, addr := range addrs {
				if err := clusterReady(ctx, addr, clusterNodes); err != nil {
					return err
				}
			}
			return nil
		},
		readyWithin: readyTimeout,
	})
	if err != nil {
		return nil, nil, err
	}
	s := &RedisClusterServer{addrs: addrs, origin: "docker " + redisImage, ps: containerSet(c)}
	return s, s.ps.stop, nil
}
