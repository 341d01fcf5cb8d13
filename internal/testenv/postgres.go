package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
)

const (
	postgresInstall = "apt-get install -y postgresql pgbouncer"
	postgresImage   = "postgres:15"
	// postgresBin is where Debian's postgresql package puts the server.
	postgresBin = "/usr/lib/postgresql/15/bin"
	// postgresDatabase is the database every PostgreSQL server gets.
	postgresDatabase = "locker_test"
	// postgresAccount runs the servers when the tests run as root, which
	// initdb, postgres and pgbouncer refuse.
	postgresAccount = "postgres"
	// postgresInitTimeout bounds initdb and the container's first start,
	// which initialises its data directory.
	postgresInitTimeout = 60 * time.Second
)

// postgresServerArgs are server settings for tests, shared by the binary
// and the container: room for many pools, and no fsync (durability does not
// matter in tests).
var postgresServerArgs = []string{
	"-c", "max_connections=800",
	"-c", "fsync=off",
	"-c", "synchronous_commit=off",
	"-c", "full_page_writes=off",
	"-c", "shared_buffers=32MB",
	// A statement whose client is gone ends within a second, even one
	// that no cancel request reached (a pooler's harness sends none).
	"-c", "client_connection_check_interval=1000",
}

// PostgresServer is a PostgreSQL server for tests. Its methods are safe for
// concurrent use.
type PostgresServer struct {
	url    string // of the locker_test database
	addr   string
	origin string // where the server came from, for messages

	ps procSet // empty when named by LOCKER_POSTGRES_URL
}

// URL returns a connection URL of the server's locker_test database (or
// the one given in LOCKER_POSTGRES_URL), for example
// "postgres://postgres@127.0.0.1:PORT/locker_test?sslmode=disable".
func (s *PostgresServer) URL() string { return s.url }

// Addr returns the server's host:port. To route one client through a
// [Proxy], replace the host of URL with the proxy's address.
func (s *PostgresServer) Addr() string { return s.addr }

// Restart stops the server (fast shutdown: clients are disconnected) and
// starts it again on the same address and data directory. It returns when
// the server answers again. Only a server this package started (a container
// or a binary) can be restarted: otherwise Restart fails the test under
// [CI] and skips it elsewhere.
func (s *PostgresServer) Restart(t testing.TB) {
	t.Helper()
	s.ps.restart(t, fmt.Sprintf("the postgres server at %s from %s", s.addr, s.origin),
		[]func(context.Context) error{func(ctx context.Context) error { return postgresPing(ctx, s.url) }}, nil)
}

// Postgres returns the PostgreSQL server shared by the tests of this test
// binary, starting it on first use. It skips or fails the test when no
// server can be had.
func Postgres(t testing.TB) *PostgresServer {
	t.Helper()
	return sharedServer(t, "postgres", startPostgres)
}

// NewPostgres returns a PostgreSQL server of this test's own, which it may
// restart, stopped when the test ends (see [ownServer]).
func NewPostgres(t testing.TB) *PostgresServer {
	t.Helper()
	return ownServer(t, postgresSource())
}

// SharedPostgres is [SharedRedis] for the PostgreSQL server of [Postgres].
func SharedPostgres() (*PostgresServer, error) { return shared("postgres", startPostgres) }

// WithHost returns u with its host:port replaced by addr (a [Proxy]'s).
func WithHost(rawURL, addr string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	u.Host = addr
	return u.String(), nil
}

// withDatabase returns rawURL with its database replaced by db.
func withDatabase(rawURL, db string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + db
	return u.String(), nil
}

// Activity returns the sessions of the server's pg_stat_activity on the
// database of URL (but its own), one line each, for a failed test's log:
// what each runs or waits for, and since when.
func (s *PostgresServer) Activity(ctx context.Context) (string, error) {
	return postgresRows(ctx, s.url, `SELECT pid, state, wait_event_type, wait_event,
		round(extract(epoch FROM now() - xact_start)::numeric, 3) AS xact_s,
		round(extract(epoch FROM now() - query_start)::numeric, 3) AS query_s,
		left(regexp_replace(query, '\s+', ' ', 'g'), 160) AS query
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
		ORDER BY xact_start NULLS LAST, query_start`)
}

// postgresRows runs query on a new connection and returns its rows, one
// line each, as column=value pairs.
func postgresRows(ctx context.Context, rawURL, query string) (string, error) {
	c, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return "", err
	}
	defer c.Close(context.WithoutCancel(ctx))
	rows, err := c.Query(ctx, query, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		for i, f := range rows.FieldDescriptions() {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%s", f.Name, rows.RawValues()[i])
		}
		b.WriteByte('\n')
	}
	return b.String(), rows.Err()
}

// postgresPing checks that the server of rawURL accepts a connection.
func postgresPing(ctx context.Context, rawURL string) error {
	c, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	return c.Ping(ctx)
}

// postgresExec runs one statement on a new connection.
func postgresExec(ctx context.Context, rawURL, stmt string) error {
	c, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, stmt)
	return err
}

// startPostgres finds a PostgreSQL server: from the environment, Docker or
// a binary.
func startPostgres() (*PostgresServer, func(), error) { return postgresSource().provision() }

// postgresSource is the ways to a PostgreSQL server.
func postgresSource() source[*PostgresServer] {
	return source[*PostgresServer]{
		what: "postgres", env: EnvPostgresURL, install: postgresInstall,
		fromEnv:   postgresFromEnv,
		container: postgresContainer,
		binaries: func() ([]string, error) {
			return lookPostgres("postgres", "initdb")
		},
		start: func(p []string) (*PostgresServer, func(), error) { return postgresBinary(p[0], p[1]) },
	}
}

// lookPostgres finds PostgreSQL programs on PATH, else in the directory
// LOCKER_POSTGRES_BIN names (Debian's versioned one when unset; none when
// set empty).
func lookPostgres(names ...string) ([]string, error) {
	paths, err := lookPaths(names...)
	if err == nil {
		return paths, nil
	}
	dir, set := os.LookupEnv(EnvPostgresBin)
	if !set {
		dir = postgresBin
	}
	if dir == "" {
		return nil, err
	}
	for i, n := range names {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s not on PATH nor in %s", n, dir)
		}
		paths[i] = p
	}
	return paths, nil
}

// postgresFromEnv uses the server named by LOCKER_POSTGRES_URL.
func postgresFromEnv(rawURL string) (*PostgresServer, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", EnvPostgresURL, err)
	}
	if err := postgresPing(ctx, rawURL); err != nil {
		return nil, nil, fmt.Errorf("postgres from %s: %w", EnvPostgresURL, err)
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	return &PostgresServer{url: rawURL, addr: addr, origin: EnvPostgresURL}, func() {}, nil
}

// serverAccount returns the account the servers run as: none (this
// process's) unless this process is root.
func serverAccount() (string, error) {
	if os.Geteuid() != 0 {
		return "", nil
	}
	if _, err := user.Lookup(postgresAccount); err != nil {
		return "", fmt.Errorf("running as root, and PostgreSQL refuses root: no %s account (%w)", postgresAccount, err)
	}
	return postgresAccount, nil
}

// chownTo gives dir to account (nothing for "").
func chownTo(dir, account string) error {
	if account == "" {
		return nil
	}
	u, err := user.Lookup(account)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// postgresURL is the URL of the superuser without a password at addr.
func postgresURL(addr, db string) string {
	return "postgres://postgres@" + addr + "/" + db + "?sslmode=disable"
}

// postgresBinary initialises a data directory with initdb (trust
// authentication, loopback only) and runs postgres on it on a free port.
func postgresBinary(postgres, initdb string) (*PostgresServer, func(), error) {
	account, err := serverAccount()
	if err != nil {
		return nil, nil, err
	}
	dir, err := tempDir("postgres")
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*PostgresServer, func(), error) {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	if err := chownTo(dir, account); err != nil {
		return fail(fmt.Errorf("give %s to %s: %w", dir, account, err))
	}
	datadir := filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), postgresInitTimeout)
	defer cancel()
	if err := runToolAs(ctx, account, dir, initdb, "-D", datadir, "-U", "postgres", "--auth=trust",
		"--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		return fail(fmt.Errorf("initdb: %w", err))
	}

	ctx, cancel = context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var (
		p    *process
		addr string
	)
	err = retryPorts(1, func(ports []int) error {
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		args := append([]string{
			"-D", datadir,
			"-h", "127.0.0.1",
			"-p", strconv.Itoa(ports[0]),
			"-k", dir,
		}, postgresServerArgs...)
		p = newProcess("postgres", postgres, dir, args...)
		p.user, p.stopSig = account, syscall.SIGINT
		return startReady(ctx, p, func(ctx context.Context) error { return postgresPing(ctx, postgresURL(addr, "postgres")) })
	})
	if err != nil {
		return fail(err)
	}
	if err := postgresExec(ctx, postgresURL(addr, "postgres"), "CREATE DATABASE "+postgresDatabase); err != nil {
		p.stop()
		return fail(fmt.Errorf("create database %s: %w", postgresDatabase, err))
	}
	s := &PostgresServer{url: postgresURL(addr, postgresDatabase), addr: addr, origin: postgres, ps: newProcSet(p)}
	return s, func() {
		s.ps.stop()
		_ = os.RemoveAll(dir)
	}, nil
}

// postgresContainer runs postgres:15 in Docker with trust authentication
// and the locker_test database.
func postgresContainer() (*PostgresServer, func(), error) {
	addrs, c, err := startContainer(containerSpec{
		image:   postgresImage,
		nports:  1,
		publish: 1,
		opts: func(ports []int, loopback bool) []testcontainers.ContainerCustomizer {
			args := append([]string{"-c", "listen_addresses=" + containerListen(loopback), "-c", "port=" + strconv.Itoa(ports[0])},
				postgresServerArgs...)
			return []testcontainers.ContainerCustomizer{
				testcontainers.WithEnv(map[string]string{
					"POSTGRES_HOST_AUTH_METHOD": "trust",
					"POSTGRES_DB":               postgresDatabase,
				}),
				testcontainers.WithCmd(args...),
			}
		},
		// The image initialises its data directory with networking off,
		// so a TCP connection that works is the final server.
		ready: func(ctx context.Context, addrs []string) error {
			return postgresPing(ctx, postgresURL(addrs[0], postgresDatabase))
		},
		readyWithin: postgresInitTimeout,
	})
	if err != nil {
		return nil, nil, err
	}
	s := &PostgresServer{url: postgresURL(addrs[0], postgresDatabase), addr: addrs[0],
		origin: "docker " + postgresImage, ps: containerSet(c)}
	return s, s.ps.stop, nil
}

// containerListen is the address a server in a container listens on: the
// loopback on the host's network, every interface on a bridge.
func containerListen(loopback bool) string {
	if loopback {
		return "127.0.0.1"
	}
	return "*"
}

// PgBouncer is a PgBouncer in transaction pooling mode in front of a
// [PostgresServer], for tests.
type PgBouncer struct {
	url  string
	addr string
	// state tells whether the pooler still runs, with its log's last
	// lines; nil in a container.
	state func() string
}

// URL returns a connection URL of the locker_test database through the
// pooler. It sets pgx's default_query_exec_mode=simple_protocol: PgBouncer
// before 1.21 does not carry prepared statements across transactions.
func (b *PgBouncer) URL() string { return b.url }

// Addr returns the pooler's host:port.
func (b *PgBouncer) Addr() string { return b.addr }

// Log tells, for a failed test's log, whether the pooler's process still
// runs (or how it ended) and its log's last lines. Under LOCKER_TESTENV=docker
// it says that the log is the container's.
func (b *PgBouncer) Log(context.Context) (string, error) {
	if b.state == nil {
		return "", errors.New("the pooler runs in a container: see its logs there")
	}
	return b.state(), nil
}

// Pools returns the pooler's SHOW POOLS, one line per pool, for a failed
// test's log: clients waiting for a server connection, servers in use.
func (b *PgBouncer) Pools(ctx context.Context) (string, error) {
	u, err := withDatabase(b.url, "pgbouncer")
	if err != nil {
		return "", err
	}
	return postgresRows(ctx, u, "SHOW POOLS")
}

// NewPgBouncer starts a PgBouncer (pool_mode=transaction, trust
// authentication, loopback only) in front of srv for this test only. It
// runs the pgbouncer binary, or under LOCKER_TESTENV=docker a container of
// the postgres:15 stand-in that .ci/docker-suite builds (the official image
// has no pgbouncer). LOCKER_TESTENV=env skips the test.
func NewPgBouncer(t testing.TB, srv *PostgresServer) *PgBouncer {
	t.Helper()
	if only, err := onlyWay(); err == nil && only == viaDocker {
		return dedicatedServer(t, func() (*PgBouncer, func(), error) { return pgbouncerContainer(srv) })
	}
	return dedicatedBinary(t, "pgbouncer", postgresInstall, []string{"pgbouncer"}, func(p []string) (*PgBouncer, func(), error) {
		return pgbouncerBinary(p[0], srv)
	})
}

// pgbouncerBinary writes a configuration and starts pgbouncer on a free
// port in front of srv.
func pgbouncerBinary(path string, srv *PostgresServer) (*PgBouncer, func(), error) {
	if _, err := exec.LookPath(path); err != nil {
		return nil, nil, err
	}
	account, err := serverAccount()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pgx.ParseConfig(srv.url)
	if err != nil {
		return nil, nil, err
	}
	dir, err := tempDir("pgbouncer")
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*PgBouncer, func(), error) {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	users := filepath.Join(dir, "users.txt")
	if err := os.WriteFile(users, []byte(pgbouncerUsers(cfg.User)), 0o600); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var (
		p   *process
		bu  string
		adr string
	)
	err = retryPorts(1, func(ports []int) error {
		adr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		ini := filepath.Join(dir, "pgbouncer.ini")
		conf := pgbouncerConfig(cfg.Host, cfg.Port, "127.0.0.1", ports[0], users, cfg.User)
		if err := os.WriteFile(ini, []byte(conf), 0o600); err != nil {
			return err
		}
		if err := chownTo(dir, account); err != nil {
			return err
		}
		p = newProcess("pgbouncer", path, dir, ini)
		p.user = account
		if bu, err = pgbouncerURL(srv.url, adr); err != nil {
			return err
		}
		return startReady(ctx, p, func(ctx context.Context) error { return postgresPing(ctx, bu) })
	})
	if err != nil {
		return fail(err)
	}
	state := func() string {
		run := "pgbouncer runs"
		select {
		case <-p.done():
			run = p.exitErr().Error()
		default:
		}
		return run + "; its log's last lines:\n" + p.logTail()
	}
	return &PgBouncer{url: bu, addr: adr, state: state}, func() {
		p.stop()
		_ = os.RemoveAll(dir)
	}, nil
}

// pgbouncerUsers is the auth_file that lets user in (trust authentication
// still wants the name listed).
func pgbouncerUsers(user string) string { return fmt.Sprintf("%q \"\"\n", user) }

// pgbouncerConfig is the configuration of a PgBouncer listening on
// listen:port in front of the server at host:serverPort.
func pgbouncerConfig(host string, serverPort uint16, listen string, port int, usersFile, user string) string {
	return strings.Join([]string{
		"[databases]",
		fmt.Sprintf("* = host=%s port=%d", host, serverPort),
		"[pgbouncer]",
		"listen_addr = " + listen,
		"listen_port = " + strconv.Itoa(port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + usersFile,
		// The tests' user reads SHOW POOLS on the admin console (Pools).
		"stats_users = " + user,
		"pool_mode = transaction",
		"max_client_conn = 2000",
		"default_pool_size = 40",
		"ignore_startup_parameters = extra_float_digits",
		// After a failed login to a restarting server, PgBouncer refuses
		// clients for this long (15 s by default, longer than a lease).
		"server_login_retry = 1",
		"",
	}, "\n")
}

// pgbouncerURL is the server's URL serverURL with the pooler's address and
// the simple protocol.
func pgbouncerURL(serverURL, addr string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	u.Host = addr
	q := u.Query()
	q.Set("default_query_exec_mode", "simple_protocol")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// pgbouncerContainer runs pgbouncer from the postgres:15 stand-in image in
// front of srv, with the configuration of the binary path. On the bridge
// network it reaches the server at its container's address, so srv must be
// a container there.
func pgbouncerContainer(srv *PostgresServer) (*PgBouncer, func(), error) {
	cfg, err := pgx.ParseConfig(srv.url)
	if err != nil {
		return nil, nil, err
	}
	hostNet, err := dockerHostNetwork()
	if err != nil {
		return nil, nil, err
	}
	host := cfg.Host
	if !hostNet {
		if srv.ps.ctr == nil {
			return nil, nil, fmt.Errorf("pgbouncer container on the bridge network: the postgres server at %s is not a container", srv.addr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if host, err = srv.ps.ctr.ContainerIP(ctx); err != nil {
			return nil, nil, fmt.Errorf("address of the postgres container: %w", err)
		}
	}
	const ini, users = "/tmp/pgbouncer.ini", "/tmp/pgbouncer-users.txt"
	addrs, c, err := startContainer(containerSpec{
		image:   postgresImage,
		nports:  1,
		publish: 1,
		opts: func(ports []int, loopback bool) []testcontainers.ContainerCustomizer {
			return []testcontainers.ContainerCustomizer{
				testcontainers.WithFiles(
					testcontainers.ContainerFile{ContainerFilePath: ini, FileMode: 0o644,
						Reader: strings.NewReader(pgbouncerConfig(host, cfg.Port, containerListen(loopback), ports[0], users, cfg.User))},
					testcontainers.ContainerFile{ContainerFilePath: users, FileMode: 0o644,
						Reader: strings.NewReader(pgbouncerUsers(cfg.User))}),
				testcontainers.WithCmd("pgbouncer", ini),
			}
		},
		ready: func(ctx context.Context, addrs []string) error {
			u, err := pgbouncerURL(srv.url, addrs[0])
			if err != nil {
				return err
			}
			return postgresPing(ctx, u)
		},
		readyWithin: readyTimeout,
	})
	if err != nil {
		return nil, nil, err
	}
	bu, err := pgbouncerURL(srv.url, addrs[0])
	if err != nil {
		terminateContainer(c)
		return nil, nil, err
	}
	return &PgBouncer{url: bu, addr: addrs[0]}, func() { terminateContainer(c) }, nil
}
