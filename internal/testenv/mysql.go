package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/testcontainers/testcontainers-go"
)

const (
	mysqlInstall = "apt-get install -y mariadb-server"
	mysqlImage   = "mariadb:10.11"
	// mysqlDatabase is the database every MySQL server gets.
	mysqlDatabase = "locker_test"
	// mysqlInitTimeout bounds mariadb-install-db and the container's first
	// start, which initialises its datadir.
	mysqlInitTimeout = 60 * time.Second
)

// mysqlServerArgs are server options shared by the binary and the container:
// many connections (tests open many Lockers), utf8mb4, and no fsync per
// commit (durability does not matter in tests).
var mysqlServerArgs = []string{
	"--max-connections=1000",
	"--character-set-server=utf8mb4",
	"--collation-server=utf8mb4_unicode_ci",
	"--innodb-flush-log-at-trx-commit=2",
	"--skip-name-resolve",
}

// MySQLServer is a MariaDB (or MySQL) server for tests. Its methods are safe
// for concurrent use.
type MySQLServer struct {
	cfg    *mysql.Config // connects to the locker_test database
	origin string        // where the server came from, for messages

	ps procSet // empty unless started from a binary
}

// Restart stops the server and starts it again on the same address with the
// same data directory, as a database restart does: tables and rows survive,
// connections are closed and, while it restarts, refused. It returns when
// the server answers again. Only a server started from a binary can be
// restarted: otherwise Restart skips the test.
//
// Restarting the shared server ([MySQL]) disturbs every test using it; tests
// that restart should use [NewMySQL] instead.
func (s *MySQLServer) Restart(t testing.TB) {
	t.Helper()
	s.ps.restart(t, fmt.Sprintf("the mysql server at %s from %s", s.cfg.Addr, s.origin),
		[]func(context.Context) error{func(ctx context.Context) error { return mysqlPing(ctx, s.cfg) }}, nil)
}

// NewMySQLTLS returns a MariaDB server for this test only that also accepts
// TLS with files (the server's certificate and key, and the CA of the
// client certificates it accepts). It needs the mariadbd binaries: the
// environment and Docker cannot provide one.
func NewMySQLTLS(t testing.TB, files TLSFiles) *MySQLServer {
	t.Helper()
	return dedicatedBinary(t, "mysql (TLS)", mysqlInstall, []string{"mariadbd", "mariadb-install-db"}, func(p []string) (*MySQLServer, func(), error) {
		return mysqlBinary(p[0], p[1], &files)
	})
}

// NewMySQL returns a MariaDB server of this test's own, which it may
// restart, stopped when the test ends (see [ownServer]).
func NewMySQL(t testing.TB) *MySQLServer {
	t.Helper()
	return ownServer(t, mysqlSource())
}

// DSN returns a go-sql-driver DSN of the server's locker_test database (or
// of the DSN given in LOCKER_MYSQL_DSN), for example
// "root@tcp(127.0.0.1:PORT)/locker_test?parseTime=true". Tests sharing the
// server share that database; [NewDatabase] gives a test its own.
func (s *MySQLServer) DSN() string { return s.cfg.FormatDSN() }

// Addr returns the server's host:port. To route one client through a
// [Proxy], parse DSN with mysql.ParseDSN and replace its Addr.
func (s *MySQLServer) Addr() string { return s.cfg.Addr }

// MySQL returns the MariaDB server shared by the tests of this test binary,
// starting it on first use (see the package doc for where it comes from).
// It skips or fails the test when no server can be had.
func MySQL(t testing.TB) *MySQLServer {
	t.Helper()
	return sharedServer(t, "mysql", startMySQL)
}

// NewDatabase creates an empty database on the shared server ([MySQL]) for
// this test only, dropped when the test ends, and returns its DSN.
func NewDatabase(t testing.TB) string {
	t.Helper()
	s := MySQL(t)
	name := databaseName(t.Name())

	admin := s.cfg.Clone()
	admin.DBName = ""
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := mysqlExec(ctx, admin, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := mysqlExec(ctx, admin, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	cfg := s.cfg.Clone()
	cfg.DBName = name
	return cfg.FormatDSN()
}

// databaseName turns a test name into a unique database name: lower-case
// letters, digits and underscores, at most 64 characters.
func databaseName(testName string) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(suffix[:]))
	return b.String()
}

// mysqlExec runs one statement on a new connection pool for cfg.
func mysqlExec(ctx context.Context, cfg *mysql.Config, stmt string) error {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// mysqlPing checks that the server of cfg accepts a connection.
func mysqlPing(ctx context.Context, cfg *mysql.Config) error {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	return db.PingContext(ctx)
}

// startMySQL finds a MariaDB server: from the environment, Docker or a
// binary.
func startMySQL() (*MySQLServer, func(), error) { return mysqlSource().provision() }

// mysqlSource is the ways to a MariaDB server.
func mysqlSource() source[*MySQLServer] {
	return source[*MySQLServer]{
		what: "mysql (mariadb)", env: EnvMySQLDSN, install: mysqlInstall,
		fromEnv:   mysqlFromEnv,
		container: mysqlContainer,
		binaries:  func() ([]string, error) { return lookPaths("mariadbd", "mariadb-install-db") },
		start:     func(p []string) (*MySQLServer, func(), error) { return mysqlBinary(p[0], p[1], nil) },
	}
}

// mysqlFromEnv uses the server named by LOCKER_MYSQL_DSN. Without a database
// name in the DSN, it creates and uses locker_test.
func mysqlFromEnv(dsn string) (*MySQLServer, func(), error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", EnvMySQLDSN, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cfg.DBName == "" {
		if err := mysqlExec(ctx, cfg, "CREATE DATABASE IF NOT EXISTS "+mysqlDatabase); err != nil {
			return nil, nil, fmt.Errorf("mysql from %s: %w", EnvMySQLDSN, err)
		}
		cfg.DBName = mysqlDatabase
	}
	if err := mysqlPing(ctx, cfg); err != nil {
		return nil, nil, fmt.Errorf("mysql from %s: %w", EnvMySQLDSN, err)
	}
	return &MySQLServer{cfg: cfg, origin: EnvMySQLDSN}, func() {}, nil
}

// rootConfig is the configuration of root without a password at addr.
func rootConfig(addr, dbName string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = addr
	cfg.DBName = dbName
	cfg.ParseTime = true
	return cfg
}

// mysqlBinary initialises a datadir with mariadb-install-db and runs mariadbd
// on it, on a free port, with root without a password.
func mysqlBinary(mysqld, installDB string, tls *TLSFiles) (*MySQLServer, func(), error) {
	dir, err := tempDir("mysql")
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*MySQLServer, func(), error) {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	datadir := filepath.Join(dir, "data")
	var asRoot []string
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"} // mariadbd refuses to run as root otherwise
	}

	ctx, cancel := context.WithTimeout(context.Background(), mysqlInitTimeout)
	defer cancel()
	if err := initMariaDB(ctx, installDB, dir, asRoot); err != nil {
		return fail(err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var (
		p   *process
		cfg *mysql.Config
	)
	err = retryPorts(1, func(ports []int) error {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		args := append([]string{
			"--no-defaults", // must come first
			"--datadir=" + datadir,
			"--bind-address=127.0.0.1",
			"--port=" + strconv.Itoa(ports[0]),
			"--socket=" + filepath.Join(dir, "sock"),
			"--pid-file=" + filepath.Join(dir, "mariadbd.pid"),
			"--tmpdir=" + dir,
		}, mysqlServerArgs...)
		args = append(args, asRoot...)
		if tls != nil {
			args = append(args, "--ssl-cert="+tls.CertFile, "--ssl-key="+tls.KeyFile, "--ssl-ca="+tls.CAFile)
		}
		p = newProcess("mariadbd", mysqld, dir, args...)
		cfg = rootConfig(addr, "")
		return startReady(ctx, p, func(ctx context.Context) error { return mysqlPing(ctx, cfg) })
	})
	if err != nil {
		return fail(err)
	}
	if err := mysqlExec(ctx, cfg, "CREATE DATABASE IF NOT EXISTS "+mysqlDatabase); err != nil {
		p.stop()
		return fail(fmt.Errorf("create database %s: %w", mysqlDatabase, err))
	}
	cfg.DBName = mysqlDatabase
	s := &MySQLServer{cfg: cfg, origin: mysqld, ps: newProcSet(p)}
	return s, func() {
		s.ps.stop()
		_ = os.RemoveAll(dir)
	}, nil
}

// initMariaDB initialises the datadir dir/data with mariadb-install-db.
// Its temporary files go to dir: in a shared /tmp, concurrent
// initialisations (parallel test processes) removed each other's and
// failed ("Could not remove temporary table").
func initMariaDB(ctx context.Context, installDB, dir string, asRoot []string) error {
	args := append([]string{
		"--no-defaults",
		"--datadir=" + filepath.Join(dir, "data"),
		"--tmpdir=" + dir,
		"--auth-root-authentication-method=normal",
		"--skip-test-db",
	}, asRoot...)
	if err := runTool(ctx, dir, installDB, args...); err != nil {
		return fmt.Errorf("initialise mariadb datadir: %w", err)
	}
	return nil
}

// mysqlContainer runs mariadb:10.11 in Docker with root without a password.
func mysqlContainer() (*MySQLServer, func(), error) {
	addrs, c, err := startContainer(containerSpec{
		image:   mysqlImage,
		nports:  1,
		publish: 1,
		opts: func(ports []int, loopback bool) []testcontainers.ContainerCustomizer {
			args := append([]string{"--port=" + strconv.Itoa(ports[0])}, mysqlServerArgs...)
			if loopback {
				args = append(args, "--bind-address=127.0.0.1")
			}
			return []testcontainers.ContainerCustomizer{
				testcontainers.WithEnv(map[string]string{
					"MARIADB_ALLOW_EMPTY_ROOT_PASSWORD": "1",
					"MARIADB_DATABASE":                  mysqlDatabase,
				}),
				testcontainers.WithCmd(args...),
			}
		},
		// The image initialises its datadir with networking off, so a TCP
		// connection that works is the final server.
		ready: func(ctx context.Context, addrs []string) error {
			return mysqlPing(ctx, rootConfig(addrs[0], mysqlDatabase))
		},
		readyWithin: mysqlInitTimeout,
	})
	if err != nil {
		return nil, nil, err
	}
	s := &MySQLServer{cfg: rootConfig(addrs[0], mysqlDatabase), origin: "docker " + mysqlImage, ps: containerSet(c)}
	return s, s.ps.stop, nil
}
