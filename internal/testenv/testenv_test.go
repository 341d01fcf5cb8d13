package testenv

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/golocker/locker/internal/freeport"
)

func TestMain(m *testing.M) { Main(m) }

// timed runs f and logs how long it took.
func timed[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	start := time.Now()
	v := f()
	t.Logf("%s ready in %v", what, time.Since(start).Round(time.Millisecond))
	return v
}

func TestRedis(t *testing.T) {
	t.Parallel()
	s := timed(t, "shared redis", func() *RedisServer { return Redis(t) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := redisPing(ctx, s.Addr()); err != nil {
		t.Fatalf("shared redis at %s does not answer: %v", s.Addr(), err)
	}
	if again := Redis(t); again != s {
		t.Fatalf("Redis returned a second server %s; want the shared %s", again.Addr(), s.Addr())
	}
}

func TestRedisRestartEmptiesDataset(t *testing.T) {
	t.Parallel()
	s := timed(t, "dedicated redis", func() *RedisServer { return NewRedis(t) })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := respDo(ctx, s.Addr(), "SET", "k", "v"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	addr := s.Addr()
	timed(t, "redis restart", func() struct{} { s.Restart(t); return struct{}{} })
	if s.Addr() != addr {
		t.Fatalf("address changed across restart: %s -> %s", addr, s.Addr())
	}
	got, err := respDo(ctx, s.Addr(), "EXISTS", "k")
	if err != nil {
		t.Fatalf("EXISTS after restart: %v", err)
	}
	if got != "0" {
		t.Fatalf("key survived the restart (EXISTS = %s); a restart must start from an empty dataset", got)
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	s := timed(t, "redis cluster", func() *RedisClusterServer { return RedisCluster(t) })
	addrs := s.Addrs()
	if len(addrs) != clusterNodes {
		t.Fatalf("Addrs() = %v; want %d nodes", addrs, clusterNodes)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, addr := range addrs {
		if err := clusterReady(ctx, addr, clusterNodes); err != nil {
			t.Errorf("cluster not healthy: %v", err)
		}
	}
	// A key is served by exactly one node; the others redirect.
	var served, moved int
	for _, addr := range addrs {
		_, err := respDo(ctx, addr, "SET", "{locker}k", "v")
		switch {
		case err == nil:
			served++
		case strings.Contains(err.Error(), "MOVED"):
			moved++
		default:
			t.Errorf("SET on %s: %v", addr, err)
		}
	}
	if served != 1 || moved != clusterNodes-1 {
		t.Errorf("SET served by %d nodes, redirected by %d; want 1 and %d", served, moved, clusterNodes-1)
	}
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	s := timed(t, "shared mariadb", func() *MySQLServer { return MySQL(t) })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	db, err := sql.Open("mysql", s.DSN())
	if err != nil {
		t.Fatalf("open %s: %v", s.DSN(), err)
	}
	defer db.Close()
	var name string
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatalf("query %s: %v", s.DSN(), err)
	}
	if name != mysqlDatabase {
		t.Errorf("DSN() database = %q; want %q", name, mysqlDatabase)
	}

	dsn := NewDatabase(t)
	fresh, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	defer fresh.Close()
	if _, err := fresh.ExecContext(ctx, "CREATE TABLE locks (k VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL)"); err != nil {
		t.Fatalf("create table in %s: %v", dsn, err)
	}
	if err := fresh.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatalf("query %s: %v", dsn, err)
	}
	if name == mysqlDatabase || !strings.HasPrefix(name, "t_testmysql_") {
		t.Errorf("NewDatabase gave database %q; want a fresh one named after the test", name)
	}
}

func TestZooKeeper(t *testing.T) {
	t.Parallel()
	s := timed(t, "shared zookeeper", func() *ZooKeeperServer { return ZooKeeper(t) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, addr := range s.Servers() {
		if err := zkServing(ctx, addr); err != nil {
			t.Errorf("zookeeper at %s does not serve: %v", addr, err)
		}
		if got := zkWord(t, addr, "ruok"); got != "imok" {
			t.Errorf("ruok answered %q; want imok", got)
		}
		if conf := zkWord(t, addr, "conf"); !strings.Contains(conf, "minSessionTimeout=400") {
			t.Errorf("conf does not show minSessionTimeout=400 (tickTime 200):\n%s", conf)
		}
	}
}

func TestZooKeeperRestart(t *testing.T) {
	t.Parallel()
	s := timed(t, "dedicated zookeeper", func() *ZooKeeperServer { return NewZooKeeper(t) })
	before := s.Servers()
	timed(t, "zookeeper restart", func() struct{} { s.Restart(t); return struct{}{} })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := zkServing(ctx, before[0]); err != nil {
		t.Fatalf("zookeeper at %s does not serve after restart: %v", before[0], err)
	}
}

// zkWord sends a four-letter word and returns the answer.
func zkWord(t *testing.T, addr, word string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(word)); err != nil {
		t.Fatalf("%s: %v", word, err)
	}
	var b strings.Builder
	if _, err := bufio.NewReader(conn).WriteTo(&b); err != nil {
		t.Fatalf("%s: %v", word, err)
	}
	return strings.TrimSpace(b.String())
}

// respClient is a RESP connection kept open across proxy faults.
type respClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialRESP(t *testing.T, addr string) *respClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &respClient{conn: conn, r: bufio.NewReader(conn)}
}

// send writes a command.
func (c *respClient) send(t *testing.T, args ...string) {
	t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := respWrite(c.conn, args...); err != nil {
		t.Fatalf("write %v: %v", args, err)
	}
}

// read waits up to d for one reply.
func (c *respClient) read(d time.Duration) (string, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	return respRead(c.r)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyCutAndHeal(t *testing.T) {
	redis := Redis(t)
	p := NewProxy(t, redis.Addr())

	old := dialRESP(t, p.Addr())
	old.send(t, "PING")
	if got, err := old.read(5 * time.Second); err != nil || got != "PONG" {
		t.Fatalf("PING through the proxy = %q, %v; want PONG", got, err)
	}

	p.Cut()
	old.send(t, "ECHO", "held")
	if got, err := old.read(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("during Cut an open connection got %q, %v; want a timeout (a partition drops traffic silently)", got, err)
	}
	fresh := dialRESP(t, p.Addr()) // accepted, but not connected to the server
	fresh.send(t, "PING")
	if got, err := fresh.read(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("during Cut a new connection got %q, %v; want a timeout", got, err)
	}
	direct := dialRESP(t, redis.Addr())
	direct.send(t, "PING")
	if got, err := direct.read(5 * time.Second); err != nil || got != "PONG" {
		t.Fatalf("during Cut a direct connection got %q, %v; want PONG (only proxied clients are cut)", got, err)
	}

	p.Heal()
	if got, err := old.read(5 * time.Second); err != nil || got != "held" {
		t.Fatalf("after Heal the held command answered %q, %v; want held", got, err)
	}
	if got, err := fresh.read(5 * time.Second); err != nil || got != "PONG" {
		t.Fatalf("after Heal the connection made during the cut answered %q, %v; want PONG", got, err)
	}
}

func TestProxyReset(t *testing.T) {
	redis := Redis(t)
	p := NewProxy(t, redis.Addr())

	old := dialRESP(t, p.Addr())
	old.send(t, "PING")
	if got, err := old.read(5 * time.Second); err != nil || got != "PONG" {
		t.Fatalf("PING through the proxy = %q, %v; want PONG", got, err)
	}

	p.Reset()
	if got, err := old.read(5 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("after Reset an open connection read %q, %v; want a connection error", got, err)
	}
	if conn, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		if err == nil || isTimeout(err) {
			t.Fatalf("during Reset a new connection read %v; want it closed at once", err)
		}
	}

	p.Heal()
	again := dialRESP(t, p.Addr())
	again.send(t, "PING")
	if got, err := again.read(5 * time.Second); err != nil || got != "PONG" {
		t.Fatalf("after Heal PING = %q, %v; want PONG", got, err)
	}
}

// proxyGoroutines counts goroutines running Proxy code.
func proxyGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "testenv.(*Proxy)") || strings.Contains(g, "testenv.closeCancels") {
			n++
		}
	}
	return n
}

func TestProxyCloseLeavesNoGoroutines(t *testing.T) {
	redis := Redis(t)
	before := proxyGoroutines()

	var cleanups []func()
	p := NewProxy(cleanupTB{TB: t, add: func(f func()) { cleanups = append(cleanups, f) }}, redis.Addr())

	// Leave connections in every state: forwarding, held by a cut, and
	// accepted during the cut.
	a := dialRESP(t, p.Addr())
	a.send(t, "PING")
	if _, err := a.read(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	a.send(t, "PING")
	b := dialRESP(t, p.Addr())
	b.send(t, "PING")
	time.Sleep(50 * time.Millisecond)

	if len(cleanups) != 1 {
		t.Fatalf("NewProxy registered %d cleanups; want 1", len(cleanups))
	}
	done := make(chan struct{})
	go func() { cleanups[0](); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s")
	}
	// A goroutine that Close waited for may still be on its way out (its
	// deferred Done ran, its return did not yet): a leak is one that is
	// still there once they had time to end.
	n := proxyGoroutines()
	for end := time.Now().Add(5 * time.Second); n > before && time.Now().Before(end); n = proxyGoroutines() {
		time.Sleep(10 * time.Millisecond)
	}
	if n > before {
		t.Fatalf("%d proxy goroutines left 5s after Close (%d before)", n, before)
	}
	p.Close() // a second Close is a no-op
}

// cleanupTB captures Cleanup so a test can run it early.
type cleanupTB struct {
	testing.TB
	add func(func())
}

func (c cleanupTB) Cleanup(f func()) { c.add(f) }

// probeHangBound is how long a Docker probe may take before these tests
// call it hung: its own timeout (dockerProbeTimeout) with room for a
// loaded machine, where the timer and the goroutines that end the probe
// run late. A probe without a bound would hang for ever, or for the
// kernel's connect timeout, well past it.
const probeHangBound = dockerProbeTimeout + 10*time.Second

func TestDockerProbeIsFast(t *testing.T) {
	start := time.Now()
	ok, err := probeDocker()
	took := time.Since(start)
	t.Logf("docker probe: %v (%v) in %v", ok, err, took.Round(time.Millisecond))
	if took > probeHangBound {
		t.Errorf("docker probe took %v; want about %v at most", took, dockerProbeTimeout)
	}
	if ok != DockerAvailable() {
		t.Errorf("DockerAvailable() = %v; want the probe's answer %v", DockerAvailable(), ok)
	}
}

func TestDockerProbeDoesNotHang(t *testing.T) {
	// An engine that accepts connections and never answers.
	dir := t.TempDir()
	sock := filepath.Join(dir, "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	})
	// An engine that answers /_ping.
	okSock := filepath.Join(dir, "ok.sock")
	okLn, err := net.Listen("unix", okSock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_ping" {
			fmt.Fprint(w, "OK")
			return
		}
		http.NotFound(w, r)
	})}
	wg.Go(func() { _ = srv.Serve(okLn) })
	defer srv.Close()

	for _, tc := range []struct {
		host string
		want bool
	}{
		{"unix://" + sock, false},
		{"unix://" + filepath.Join(dir, "missing.sock"), false},
		{"tcp://127.0.0.1:1", false},
		{"ssh://user@host", false},
		{"unix://" + okSock, true},
	} {
		t.Setenv("DOCKER_HOST", tc.host)
		start := time.Now()
		ok, err := probeDocker()
		took := time.Since(start)
		if ok != tc.want {
			t.Errorf("DOCKER_HOST=%s: probe = %v (%v); want %v", tc.host, ok, err, tc.want)
		}
		if took > probeHangBound {
			t.Errorf("DOCKER_HOST=%s: probe took %v; want about %v at most", tc.host, took, dockerProbeTimeout)
		}
	}
}

// noServers makes every provisioner find nothing: no environment endpoint,
// no Docker, an empty PATH.
func noServers(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(EnvNoDocker, "1")
	t.Setenv(EnvTestenv, "")
	for _, v := range []string{EnvRedisAddr, EnvRedisClusterAddrs, EnvMySQLDSN, EnvPostgresURL, EnvPostgresBin, EnvZooKeeperServers} {
		t.Setenv(v, "")
	}
	t.Setenv("ZOOKEEPER_HOME", "")
}

func TestMissingBinarySkipsOutsideCI(t *testing.T) {
	noServers(t)
	t.Setenv("CI", "")
	for name, provision := range map[string]func(t *testing.T){
		"redis":     func(t *testing.T) { NewRedis(t) },
		"zookeeper": func(t *testing.T) { NewZooKeeper(t) },
	} {
		var skipped, reached bool
		t.Run(name, func(t *testing.T) {
			defer func() { skipped = t.Skipped() }()
			provision(t)
			reached = true
		})
		if !skipped || reached {
			t.Errorf("%s without a server: skipped=%v, returned=%v; want a skip", name, skipped, reached)
		}
	}
}

// recordTB records how a test ended instead of ending it.
type recordTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recordTB) Helper() {}
func (r *recordTB) Fatal(args ...any) {
	r.failed, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recordTB) Fatalf(format string, args ...any) { r.Fatal(fmt.Sprintf(format, args...)) }
func (r *recordTB) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recordTB) Skipf(format string, args ...any) { r.Skip(fmt.Sprintf(format, args...)) }

// outcome runs f with a recordTB in its own goroutine, as a test would.
func outcome(t *testing.T, f func(testing.TB)) *recordTB {
	r := &recordTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestMissingServerUnderCI(t *testing.T) {
	noServers(t)
	for _, ci := range []string{"true", ""} {
		t.Setenv("CI", ci)
		for _, tc := range []struct {
			name, install string
			provision     func(testing.TB)
		}{
			{"redis", "apt-get install -y redis-server", func(t testing.TB) { NewRedis(t) }},
			{"zookeeper", "apt-get install -y zookeeper", func(t testing.TB) { NewZooKeeper(t) }},
			{"mysql", "apt-get install -y mariadb-server", func(t testing.TB) { _, _, err := startMySQL(); report(t, err) }},
			{"postgres", "apt-get install -y postgresql", func(t testing.TB) { NewPostgres(t) }},
			{"redis cluster", "apt-get install -y redis-server redis-tools", func(t testing.TB) { _, _, err := startRedisCluster(); report(t, err) }},
		} {
			r := outcome(t, tc.provision)
			wantFail := ci == "true"
			if r.failed != wantFail || r.skipped == wantFail {
				t.Errorf("CI=%q, %s missing: failed=%v skipped=%v; want failed=%v", ci, tc.name, r.failed, r.skipped, wantFail)
			}
			if !strings.Contains(r.msg, tc.install) {
				t.Errorf("CI=%q, %s missing: message %q does not name the install command %q", ci, tc.name, r.msg, tc.install)
			}
		}
	}
}

func TestEnvEndpoints(t *testing.T) {
	t.Setenv(EnvTestenv, "") // the endpoint variables count
	t.Setenv(EnvEtcdEndpoints, " 127.0.0.1:2379, ,127.0.0.1:22379 ")
	eps, ok := EtcdEndpoints()
	if !ok || len(eps) != 2 || eps[0] != "127.0.0.1:2379" || eps[1] != "127.0.0.1:22379" {
		t.Errorf("EtcdEndpoints() = %q, %v; want the two listed endpoints", eps, ok)
	}
	t.Setenv(EnvEtcdEndpoints, "")
	if eps, ok := EtcdEndpoints(); ok {
		t.Errorf("EtcdEndpoints() with the variable unset = %q, true; want false", eps)
	}

	// An endpoint from the environment is used as is and cannot be
	// restarted: that fails under CI and skips elsewhere.
	redis := Redis(t)
	t.Setenv(EnvRedisAddr, redis.Addr())
	s, stop, err := startRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if s.Addr() != redis.Addr() {
		t.Errorf("startRedis with %s=%s gave %s", EnvRedisAddr, redis.Addr(), s.Addr())
	}
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := outcome(t, s.Restart)
		if r.skipped == (ci == "true") || r.failed != (ci == "true") {
			t.Errorf("CI=%q: Restart of a server from %s: skipped=%v failed=%v; want a failure under CI, a skip elsewhere", ci, EnvRedisAddr, r.skipped, r.failed)
		}
	}

	// NewRedis gives a server of the test's own, which it may restart,
	// whatever the variable names.
	if own := NewRedis(t); own.Addr() == redis.Addr() {
		t.Errorf("NewRedis with %s=%s gave that server; want one of its own", EnvRedisAddr, redis.Addr())
	} else if r := outcome(t, own.Restart); r.skipped || r.failed {
		t.Errorf("Restart of NewRedis's server: skipped=%v failed=%v (%s); want it restarted", r.skipped, r.failed, r.msg)
	}

	// An endpoint that does not answer fails, even outside CI.
	t.Setenv("CI", "")
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvRedisAddr, fmt.Sprintf("127.0.0.1:%d", port))
	if r := outcome(t, func(t testing.TB) { _, _, err := startRedis(); report(t, err) }); !r.failed {
		t.Errorf("a Redis server from an unreachable %s: failed=%v skipped=%v; want a failure", EnvRedisAddr, r.failed, r.skipped)
	}
}

func TestFreePort(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("FreePort gave %d, which cannot be bound: %v", port, err)
	}
	ln.Close()
	// Servers restart on their port: it must lie below the ephemeral range,
	// where no outgoing connection can take it while the server is down.
	if low, _, err := freeport.EphemeralRange(); err == nil && low-freeport.LowestPort >= freeport.MinSpan && port >= low {
		t.Errorf("FreePort gave %d, in the ephemeral range from %d", port, low)
	}
}

func TestDatabaseName(t *testing.T) {
	name := databaseName("TestSomething/with spaces-and-ÜNICODE/" + strings.Repeat("x", 100))
	if len(name) > 64 {
		t.Errorf("databaseName is %d characters; MySQL allows 64", len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			t.Errorf("databaseName %q contains %q", name, r)
		}
	}
	if a, b := databaseName("T"), databaseName("T"); a == b {
		t.Error("databaseName is not unique")
	}
}

func TestRemoveStaleDirs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("stale directories are only swept on Linux")
	}
	mk := func(owner string) string {
		dir, err := os.MkdirTemp("", tempDirPrefix+"sweeptest-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if owner != "" {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	// PIDs above the kernel's maximum (4194304) never exist.
	dead := mk("99999999\n")
	alive := mk(fmt.Sprint(os.Getppid()))
	unowned := mk("")
	removeStaleDirs()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("directory of a dead test binary was kept (stat: %v)", err)
	}
	for _, dir := range []string{alive, unowned} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("directory %s was removed: %v", dir, err)
		}
	}
}

// fakeSource is a source whose every way is a stub that records its use.
type fakeSource struct {
	env, container, binary bool
}

func (f *fakeSource) source(containerErr error) source[string] {
	return source[string]{
		what: "fake", env: "LOCKER_TESTENV_FAKE_ADDR", install: "apt-get install -y fake",
		fromEnv: func(v string) (string, func(), error) { f.env = true; return "env", func() {}, nil },
		container: func() (string, func(), error) {
			f.container = true
			if containerErr != nil {
				return "", nil, containerErr
			}
			return "docker", func() {}, nil
		},
		binaries: func() ([]string, error) { return []string{"/bin/fake"}, nil },
		start:    func([]string) (string, func(), error) { f.binary = true; return "binary", func() {}, nil },
	}
}

func dockerUp() (bool, error)   { return true, nil }
func dockerDown() (bool, error) { return false, errors.New("no engine here") }

func TestContainerFailureDoesNotFallBack(t *testing.T) {
	t.Setenv(EnvTestenv, "")
	broken := errors.New("run container redis:77: no such image")
	for _, tc := range []struct {
		ci, only string
		want     string // "" for an error
	}{
		{ci: "", want: "binary"}, // outside CI, the binaries stand in
		{ci: "true", want: ""},   // under CI, the container's failure fails
		{ci: "", only: "docker", want: ""},
		{ci: "true", only: "docker", want: ""},
	} {
		t.Setenv("CI", tc.ci)
		t.Setenv(EnvTestenv, tc.only)
		var f fakeSource
		got, _, err := f.source(broken).provisionWith(dockerUp, false)
		if tc.want == "" {
			if err == nil || !errors.Is(err, broken) && !strings.Contains(err.Error(), broken.Error()) {
				t.Errorf("CI=%q %s=%q, container fails: got %q, %v; want the container's error", tc.ci, EnvTestenv, tc.only, got, err)
			}
			if f.binary {
				t.Errorf("CI=%q %s=%q, container fails: the binary was started", tc.ci, EnvTestenv, tc.only)
			}
			var ue *unavailableError
			if errors.As(err, &ue) {
				t.Errorf("CI=%q %s=%q: error %v is an unavailability (a skip outside CI); want a failure", tc.ci, EnvTestenv, tc.only, err)
			}
		} else if err != nil || got != tc.want {
			t.Errorf("CI=%q %s=%q, container fails: got %q, %v; want %q", tc.ci, EnvTestenv, tc.only, got, err, tc.want)
		}
	}
}

func TestOnlyOneWay(t *testing.T) {
	t.Setenv("CI", "") // a way asked for fails even outside CI
	const addr = "LOCKER_TESTENV_FAKE_ADDR"
	for _, tc := range []struct {
		only, envValue string
		docker         func() (bool, error)
		own            bool   // provisionOwn: a server the test may restart
		want, errPart  string // want "" for an error containing errPart
	}{
		{only: "env", envValue: "x", docker: dockerUp, want: "env"},
		{only: "env", docker: dockerUp, errPart: addr + " is unset"},
		{only: "docker", envValue: "x", docker: dockerUp, want: "docker"},
		{only: "docker", envValue: "x", docker: dockerDown, errPart: "no engine here"},
		{only: "binary", envValue: "x", docker: dockerUp, want: "binary"},
		{only: "", envValue: "x", docker: dockerUp, want: "env"},
		{only: "", docker: dockerUp, want: "docker"},
		{only: "", docker: dockerDown, want: "binary"},
		{only: "containers", docker: dockerUp, errPart: EnvTestenv + `="containers"`},
		// A server of the test's own passes the endpoint over, unless it
		// is the only way allowed.
		{own: true, only: "", envValue: "x", docker: dockerUp, want: "docker"},
		{own: true, only: "", envValue: "x", docker: dockerDown, want: "binary"},
		{own: true, only: "env", envValue: "x", docker: dockerUp, want: "env"},
		{own: true, only: "docker", envValue: "x", docker: dockerUp, want: "docker"},
	} {
		t.Setenv(EnvTestenv, tc.only)
		t.Setenv(addr, tc.envValue)
		var f fakeSource
		got, _, err := f.source(nil).provisionWith(tc.docker, tc.own)
		name := fmt.Sprintf("%s=%q %s=%q own=%v", EnvTestenv, tc.only, addr, tc.envValue, tc.own)
		switch {
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("%s: got %q, %v; want %q", name, got, err, tc.want)
		case tc.want == "" && (err == nil || !strings.Contains(err.Error(), tc.errPart)):
			t.Errorf("%s: got %q, %v; want an error naming %q", name, got, err, tc.errPart)
		}
		var ue *unavailableError
		if tc.want == "" && errors.As(err, &ue) {
			t.Errorf("%s: error %v is an unavailability (a skip outside CI); want a failure", name, err)
		}
	}

	// With neither Docker nor a binary, the endpoint stands in for a server
	// of the test's own.
	t.Setenv(EnvTestenv, "")
	t.Setenv(addr, "x")
	var f fakeSource
	src := f.source(nil)
	src.binaries = func() ([]string, error) { return nil, errors.New("no fake here") }
	if got, _, err := src.provisionWith(dockerDown, true); err != nil || got != "env" {
		t.Errorf("own server without Docker and binaries, %s=x: got %q, %v; want %q", addr, got, err, "env")
	}

	// Missing binaries fail when binaries were asked for.
	noServers(t)
	t.Setenv(EnvTestenv, "binary")
	if r := outcome(t, func(t testing.TB) { NewRedis(t) }); !r.failed || !strings.Contains(r.msg, "redis-server") {
		t.Errorf("%s=binary without redis-server: failed=%v skipped=%v (%s); want a failure naming redis-server", EnvTestenv, r.failed, r.skipped, r.msg)
	}
	// A server only a binary can give skips when binaries are excluded.
	t.Setenv(EnvTestenv, "docker")
	if r := outcome(t, func(t testing.TB) { NewRedisTLS(t, TLSFiles{}) }); !r.skipped {
		t.Errorf("NewRedisTLS with %s=docker: failed=%v skipped=%v (%s); want a skip", EnvTestenv, r.failed, r.skipped, r.msg)
	}
}

func TestDockerNetwork(t *testing.T) {
	for v, want := range map[string]bool{"": false, "bridge": false, "host": true} {
		t.Setenv(EnvDockerNetwork, v)
		if got, err := dockerHostNetwork(); err != nil || got != want {
			t.Errorf("%s=%q: host network = %v, %v; want %v", EnvDockerNetwork, v, got, err, want)
		}
	}
	t.Setenv(EnvDockerNetwork, "overlay")
	if _, err := dockerHostNetwork(); err == nil || !strings.Contains(err.Error(), EnvDockerNetwork) {
		t.Errorf("%s=overlay: error %v; want one naming the variable", EnvDockerNetwork, err)
	}
}
