package testenv

import (
	"context"
	"errors"
	"fmt"
	"github.com/golocker/locker/internal/storeenv"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

const (
	zkInstall = "apt-get install -y zookeeper default-jre-headless"
	zkImage   = "zookeeper:3.8"
	// zkTickTime is the ZooKeeper tick in milliseconds. Sessions may be as
	// short as two ticks (400 ms), so session expiry tests take about a
	// second.
	zkTickTime = 200
	// zkMaxSessionTimeout lifts the default cap of 20 ticks (4 s), so clients
	// get the session timeout they ask for.
	zkMaxSessionTimeout = 60000
)

// zkSettings is how a ZooKeeper server is run: its tick, its session
// timeout cap and its JVM's flags.
type zkSettings struct {
	tickTime          int // ms
	maxSessionTimeout int // ms; 0: ZooKeeper's default of 20 ticks
	jvm               []string
}

// zkTest is the test server: short ticks for quick expiries, and a JVM
// that starts fast and stays small.
var zkTest = zkSettings{
	tickTime:          zkTickTime,
	maxSessionTimeout: zkMaxSessionTimeout,
	jvm: []string{
		"-Xmx256m",
		"-XX:+UseSerialGC",
		"-XX:TieredStopAtLevel=1", // faster start, plenty for tests
	},
}

// zkProduction is a server run as zkServer.sh runs it out of the box: the
// stock JVM (its default collector and both JIT compilers), zkServer.sh's
// heap, and the sample configuration's tick of 2 s.
var zkProduction = zkSettings{
	tickTime: 2000,
	jvm:      []string{"-Xmx1000m"},
}

// ZooKeeperServer is a standalone ZooKeeper server for tests. Those of
// [ZooKeeper] and [NewZooKeeper] have a tick of 200 ms: the session timeouts
// they grant range from 400 ms to 60 s. Its methods are safe for concurrent
// use.
type ZooKeeperServer struct {
	servers []string
	origin  string

	ps procSet // empty unless started from the ZooKeeper jars
}

// Servers returns the server addresses (host:port) for a ZooKeeper client.
// The caller may modify the returned slice.
func (s *ZooKeeperServer) Servers() []string { return append([]string(nil), s.servers...) }

// Restart stops the server and starts it again on the same address with the
// same data directory, like a real server restart: znodes and sessions
// survive, and a client that reconnects within its session timeout keeps its
// session and ephemeral nodes. It returns when the server serves requests
// again. Only a server started from the jars can be restarted: otherwise
// Restart skips the test.
//
// Restarting a shared server ([ZooKeeper]) disturbs every test using it;
// tests that restart should use [NewZooKeeper] instead.
func (s *ZooKeeperServer) Restart(t testing.TB) {
	t.Helper()
	s.ps.restart(t, fmt.Sprintf("the zookeeper server at %v from %s", s.servers, s.origin),
		[]func(context.Context) error{func(ctx context.Context) error { return zkServing(ctx, s.servers[0]) }}, nil)
}

// CPU returns the CPU time the server's process has used so far, for
// benchmarks that tell the server's work from the client's. Only a server
// started from the jars on Linux can tell: for others it returns an error.
func (s *ZooKeeperServer) CPU() (time.Duration, error) { return s.ps.cpu() }

// ZooKeeper returns the ZooKeeper server shared by the tests of this test
// binary, starting it on first use (see the package doc for where it comes
// from). It skips or fails the test when no server can be had.
func ZooKeeper(t testing.TB) *ZooKeeperServer {
	t.Helper()
	return sharedServer(t, "zookeeper", startZooKeeper)
}

// NewZooKeeper returns a ZooKeeper server of this test's own, which it may
// restart, stopped when the test ends (see [ownServer]).
func NewZooKeeper(t testing.TB) *ZooKeeperServer {
	t.Helper()
	return ownServer(t, zkSource(zkTest))
}

// ZooKeeperProduction returns a ZooKeeper server shared by the tests of
// this test binary that runs as a production server does: the stock JVM
// flags of zkServer.sh and a tick of 2 s, so sessions last 4 s to 40 s. It
// is for benchmarks, which must not measure a library against a server
// slowed down for quick test starts only. It is started on first use, like
// [ZooKeeper]'s; an endpoint named by the environment is used as it is.
func ZooKeeperProduction(t testing.TB) *ZooKeeperServer {
	t.Helper()
	return sharedServer(t, "zookeeper-production", func() (*ZooKeeperServer, func(), error) {
		return zkSource(zkProduction).provision()
	})
}

// NewZooKeeperProduction returns a server of this test's own run as
// [ZooKeeperProduction]'s is: a tick of 2 s, so that the server grants no
// session shorter than 4 s. It is stopped when the test ends (see
// [ownServer]).
func NewZooKeeperProduction(t testing.TB) *ZooKeeperServer {
	t.Helper()
	return ownServer(t, zkSource(zkProduction))
}

// startZooKeeper finds a ZooKeeper server: from the environment, Docker or
// the jars.
func startZooKeeper() (*ZooKeeperServer, func(), error) { return zkSource(zkTest).provision() }

// zkSource is the ways to a ZooKeeper server run with settings set.
func zkSource(set zkSettings) source[*ZooKeeperServer] {
	var cp string
	return source[*ZooKeeperServer]{
		what: "zookeeper", env: EnvZooKeeperServers, install: zkInstall,
		fromEnv: func(string) (*ZooKeeperServer, func(), error) {
			servers := storeenv.List(EnvZooKeeperServers)
			if err := dialCheck(servers...); err != nil {
				return nil, nil, fmt.Errorf("zookeeper from %s: %w", EnvZooKeeperServers, err)
			}
			return &ZooKeeperServer{servers: servers, origin: EnvZooKeeperServers}, func() {}, nil
		},
		container: func() (*ZooKeeperServer, func(), error) { return zkContainer(set) },
		binaries: func() ([]string, error) {
			paths, err1 := lookPaths("java")
			var err2 error
			cp, err2 = zkClasspath()
			return paths, errors.Join(err1, err2)
		},
		start: func(p []string) (*ZooKeeperServer, func(), error) { return zkBinary(p[0], cp, set) },
	}
}

// zkClasspath finds the ZooKeeper jars: a distribution directory
// ($ZOOKEEPER_HOME, /opt/zookeeper, Homebrew) whose lib holds the server and
// its dependencies, else the Debian package's /usr/share/java/zookeeper.jar,
// whose manifest names its dependencies, plus slf4j-simple for logs.
func zkClasspath() (string, error) {
	homes := []string{
		os.Getenv("ZOOKEEPER_HOME"),
		"/opt/zookeeper",
		"/usr/local/zookeeper",
		"/usr/share/zookeeper",
		"/opt/homebrew/opt/zookeeper/libexec",
		"/usr/local/opt/zookeeper/libexec",
	}
	for _, home := range homes {
		if home == "" {
			continue
		}
		if jars, _ := filepath.Glob(filepath.Join(home, "lib", "zookeeper-*.jar")); len(jars) > 0 {
			return filepath.Join(home, "lib", "*") + string(os.PathListSeparator) + filepath.Join(home, "*"), nil
		}
	}
	const debianJar = "/usr/share/java/zookeeper.jar"
	if _, err := os.Stat(debianJar); err == nil {
		cp := []string{debianJar}
		if _, err := os.Stat("/usr/share/java/slf4j-simple.jar"); err == nil {
			cp = append(cp, "/usr/share/java/slf4j-simple.jar")
		}
		return strings.Join(cp, string(os.PathListSeparator)), nil
	}
	return "", errors.New("zookeeper jars not found (set ZOOKEEPER_HOME to a ZooKeeper distribution)")
}

// zkBinary runs ZooKeeperServerMain in a JVM on a free port with a temporary
// data directory.
func zkBinary(java, classpath string, set zkSettings) (*ZooKeeperServer, func(), error) {
	dir, err := tempDir("zookeeper")
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var s *ZooKeeperServer
	err = retryPorts(1, func(ports []int) error {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		cfgPath := filepath.Join(dir, "zoo.cfg")
		cfg := fmt.Sprintf(`tickTime=%d
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
`, set.tickTime, filepath.Join(dir, "data"), ports[0])
		if set.maxSessionTimeout > 0 {
			cfg += fmt.Sprintf("maxSessionTimeout=%d\n", set.maxSessionTimeout)
		}
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return err
		}
		args := append(slices.Clone(set.jvm),
			"-XX:-UsePerfData", // no /tmp/hsperfdata_* files
			"-Djava.net.preferIPv4Stack=true",
			"-Dzookeeper.admin.enableServer=false",
			"-Dzookeeper.jmx.log4j.disable=true",
			"-cp", classpath,
			"org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath,
		)
		p := newProcess("zookeeper", java, dir, args...)
		if err := startReady(ctx, p, func(ctx context.Context) error { return zkServing(ctx, addr) }); err != nil {
			return err
		}
		s = &ZooKeeperServer{servers: []string{addr}, origin: java, ps: newProcSet(p)}
		return nil
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return s, func() {
		s.ps.stop()
		_ = os.RemoveAll(dir)
	}, nil
}

// zkContainer runs zookeeper:3.8 in Docker with the tick and session cap of
// set (the image's own JVM flags). The client address comes from the server
// line (ZOO_SERVERS), as in the image's default
// "server.1=localhost:2888:3888;2181"; a standalone server opens no quorum
// port.
func zkContainer(set zkSettings) (*ZooKeeperServer, func(), error) {
	addrs, c, err := startContainer(containerSpec{
		image:   zkImage,
		nports:  1,
		publish: 1,
		opts: func(ports []int, loopback bool) []testcontainers.ContainerCustomizer {
			client := strconv.Itoa(ports[0])
			if loopback {
				client = "127.0.0.1:" + client
			}
			env := map[string]string{
				"ZOO_TICK_TIME":              strconv.Itoa(set.tickTime),
				"ZOO_MAX_CLIENT_CNXNS":       "0",
				"ZOO_4LW_COMMANDS_WHITELIST": "*",
				"ZOO_ADMINSERVER_ENABLED":    "false",
				"ZOO_SERVERS":                "server.1=localhost:2888:3888;" + client,
			}
			if set.maxSessionTimeout > 0 {
				env["ZOO_CFG_EXTRA"] = "maxSessionTimeout=" + strconv.Itoa(set.maxSessionTimeout)
			}
			return []testcontainers.ContainerCustomizer{testcontainers.WithEnv(env)}
		},
		ready:       func(ctx context.Context, addrs []string) error { return zkServing(ctx, addrs[0]) },
		readyWithin: readyTimeout,
	})
	if err != nil {
		return nil, nil, err
	}
	s := &ZooKeeperServer{servers: addrs, origin: "docker " + zkImage, ps: containerSet(c)}
	return s, s.ps.stop, nil
}

// zkServing checks with the "srvr" four-letter word that the server at addr
// serves requests (a server that is up but not serving answers without a
// Mode line).
func zkServing(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	_ = conn.SetDeadline(deadline)
	if _, err := io.WriteString(conn, "srvr"); err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(conn, 4<<10))
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "Mode:") {
		return fmt.Errorf("srvr answered %q", strings.TrimSpace(string(b)))
	}
	return nil
}
