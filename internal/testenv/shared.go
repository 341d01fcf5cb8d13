package testenv

import (
	"errors"
	"fmt"
)

// SharedRedis returns the Redis server shared by this process (the one
// [Redis] returns), for code that has no testing.TB, such as the withstores
// command. It starts the server on first use; [Shutdown] stops it.
func SharedRedis() (*RedisServer, error) { return shared("redis", startRedis) }

// SharedRedisCluster is [SharedRedis] for the Redis Cluster of
// [RedisCluster].
func SharedRedisCluster() (*RedisClusterServer, error) {
	return shared("redis-cluster", startRedisCluster)
}

// SharedMySQL is [SharedRedis] for the MariaDB server of [MySQL].
func SharedMySQL() (*MySQLServer, error) { return shared("mysql", startMySQL) }

// SharedZooKeeper is [SharedRedis] for the ZooKeeper server of
// [ZooKeeper].
func SharedZooKeeper() (*ZooKeeperServer, error) { return shared("zookeeper", startZooKeeper) }

// Unavailability tells, for an error of a TB-less provisioner such as
// [SharedRedis], whether the server is merely unavailable on this machine
// and not under [CI] (ok: a warning names it and how to install it), or
// whether it must fail the run (ok is false: the error says why).
func Unavailability(err error) (warning string, ok bool) {
	var ue *unavailableError
	if errors.As(err, &ue) && !CI() {
		return fmt.Sprintf("%s unavailable: %v\n\tinstall it with: %s", ue.what, ue.err, ue.install), true
	}
	return "", false
}
