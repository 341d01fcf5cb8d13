// Package testenv finds a real server for a backend test: Redis (single node
// and Cluster), MariaDB/MySQL, ZooKeeper, and the endpoints of an etcd
// cluster. It is our own test policy and is imported only by _test files;
// the exported conformance suite never depends on it.
//
// Backend tests run against real servers, never mocks. Faults are injected
// with [Proxy], a loopback TCP proxy that can partition one client from the
// server while others keep talking to it directly.
//
// # Where a server comes from
//
// Every provisioner tries, in this order:
//
//  1. An endpoint named by an environment variable:
//     LOCKER_REDIS_ADDR (host:port), LOCKER_REDIS_CLUSTER_ADDRS (comma list),
//     LOCKER_MYSQL_DSN (go-sql-driver DSN), LOCKER_POSTGRES_URL
//     (postgres:// URL), LOCKER_ZK_SERVERS (comma list of
//     host:port), LOCKER_ETCD_ENDPOINTS (comma list). An endpoint that does
//     not answer fails the test: it was asked for explicitly.
//  2. A container started with testcontainers-go, when a Docker engine
//     answers a /_ping within one second ([DockerAvailable]). Images:
//     redis:7, mariadb:10.11, postgres:15, zookeeper:3.8, each run with an
//     init process (so that it stops at once), ports published on 127.0.0.1
//     only. With LOCKER_DOCKER_NETWORK=host (Linux) containers run in the
//     host's network instead and their servers listen on free ports of
//     127.0.0.1 only: no bridge and no published port, for an engine
//     started with --bridge=none (.ci/docker-suite). Set LOCKER_NO_DOCKER=1
//     to skip this step.
//  3. A server binary found on PATH (redis-server; mariadbd with
//     mariadb-install-db; postgres with initdb, on PATH or in Debian's
//     /usr/lib/postgresql/15/bin, run as the postgres account under root;
//     java with the ZooKeeper jars), started on a free 127.0.0.1 port in a
//     fresh temporary directory. [NewPgBouncer] starts pgbouncer
//     (transaction pooling) in front of a PostgreSQL server: the binary,
//     or under LOCKER_TESTENV=docker a container of the image that
//     .ci/docker-suite builds for postgres:15.
//
// When none is available the test is skipped, or fails when the environment
// variable CI is true ([Unavailable]); the message names the reason and the
// command that installs the server. A server that is found but fails to start
// always fails the test, with the tail of its log: a broken installation must
// not turn into silently skipped tests. Set the environment variable instead
// if a local installation cannot be fixed. Under CI, a container that fails
// to start although Docker answers fails the test too: it does not fall back
// to the binaries, which would hide a broken Docker path.
//
// LOCKER_TESTENV=env, docker or binary makes every provisioner use that one
// way only and fail, even outside CI, naming why when it cannot serve (with
// docker and binary the endpoint variables are ignored). The servers that
// only a binary can give ([NewRedisTLS], [NewMySQLTLS]) then skip under
// docker and env.
//
// # Shared and dedicated servers
//
// [Redis], [RedisCluster], [MySQL], [Postgres] and [ZooKeeper] return a
// server shared by every test of the test binary: it is started on first use
// and stays up until [Shutdown]. Tests that share it must use their own keys
// (or their own database, see [NewDatabase]). [ZooKeeperProduction] is a
// second shared ZooKeeper server, run as in production (stock JVM flags, 2 s
// ticks), for benchmarks only: tests use the quick-starting one.
//
// [NewRedis], [NewRedisCluster], [NewMySQL], [NewPostgres] and
// [NewZooKeeper] start a server of one test's own, stopped by t.Cleanup,
// which its Restart method may restart: a container (stopped and started
// again on the same ports) or a binary, never the endpoint of an environment
// variable, which other processes may be using. That endpoint stands in only
// under LOCKER_TESTENV=env or when neither Docker nor a binary can serve.
// Restart of a server this package did not start fails the test under CI
// and skips it elsewhere.
//
// Shared servers outlive single tests, so every package that uses them stops
// them from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// which is short for
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		testenv.Shutdown()
//		os.Exit(code)
//	}
//
// On Linux the server processes also receive SIGKILL when the test binary
// dies (PR_SET_PDEATHSIG), so a crashed or killed test binary does not leave
// servers behind; their temporary directories are then left in os.TempDir
// under names starting with "locker-testenv-".
//
// # Timing
//
// Startup waits are bounded: 30 s for a binary server to answer (MariaDB's
// datadir initialisation adds its own 60 s bound), 3 minutes for a container
// including the image pull. Measured from binaries on a small VM:
// redis-server about 60 ms, a three-node Redis Cluster 2 to 3 s (mostly
// redis-cli waiting for the nodes to join), MariaDB about 1 s including
// mariadb-install-db, ZooKeeper about 0.4 s. From the Debian stand-in
// images of .ci/images on the same VM under a load average of 10 to 20:
// redis 2 to 3 s, the cluster container 4 to 10 s, MariaDB about 3 s,
// ZooKeeper 2 to 4 s. With the init process each stops in 0.3 to 0.65 s
// (docker stop at a load average of 1.5; 1 to 2.5 s at 20), its main process
// exiting on SIGTERM; the cluster container's script took 10 s without it.
package testenv
