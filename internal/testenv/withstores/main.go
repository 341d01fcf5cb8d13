// Command withstores starts the servers that the tests inside the backend
// modules read from the environment (see internal/storeenv), runs a command
// with their addresses in the LOCKER_* variables, and stops them when the
// command ends:
//
//	go run ./internal/testenv/withstores -- go test -race work
//
// The servers come from the test harness, in its order (see
// internal/testenv): a variable already set is passed on unchanged, then a
// container when a Docker engine answers, then a server binary on a free
// loopback port. A server that cannot be had leaves its variable unset (the
// tests that need it skip) with a warning, and fails the run when the
// environment variable CI is true. Tests that share these servers use keys,
// databases and nodes of their own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/golocker/locker/internal/etcdserver"
	"github.com/golocker/locker/internal/storeenv"
	"github.com/golocker/locker/internal/testenv"
	"github.com/golocker/locker/internal/testenv/internal/child"
)

// store starts one kind of server and returns the value of its variable.
type store struct {
	env   string
	start func() (string, error)
}

func main() {
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: withstores [-only redis,mysql,…] -- command [args]")
		flag.PrintDefaults()
	}
	only := flag.String("only", "", "start only these stores (redis, redis-cluster, mysql, postgres, etcd, zookeeper); default all")
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*only, flag.Args()))
}

func run(only string, args []string) int {
	var etcd *etcdserver.Server
	defer func() {
		if etcd != nil {
			etcd.Close()
		}
		testenv.Shutdown()
	}()
	stores := []store{
		{storeenv.RedisAddr, func() (string, error) {
			s, err := testenv.SharedRedis()
			if err != nil {
				return "", err
			}
			return s.Addr(), nil
		}},
		{storeenv.RedisClusterAddrs, func() (string, error) {
			s, err := testenv.SharedRedisCluster()
			if err != nil {
				return "", err
			}
			return strings.Join(s.Addrs(), ","), nil
		}},
		{storeenv.MySQLDSN, func() (string, error) {
			s, err := testenv.SharedMySQL()
			if err != nil {
				return "", err
			}
			return s.DSN(), nil
		}},
		{storeenv.PostgresURL, func() (string, error) {
			s, err := testenv.SharedPostgres()
			if err != nil {
				return "", err
			}
			return s.URL(), nil
		}},
		{storeenv.ZooKeeperServers, func() (string, error) {
			s, err := testenv.SharedZooKeeper()
			if err != nil {
				return "", err
			}
			return strings.Join(s.Servers(), ","), nil
		}},
		{storeenv.EtcdEndpoints, func() (string, error) {
			if eps, ok := testenv.EtcdEndpoints(); ok {
				return strings.Join(eps, ","), nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := etcdserver.Start(ctx, etcdserver.Config{})
			if err != nil {
				return "", err
			}
			etcd = s
			return strings.Join(s.Endpoints(), ","), nil
		}},
	}
	names := map[string]string{"redis": storeenv.RedisAddr, "redis-cluster": storeenv.RedisClusterAddrs,
		"mysql": storeenv.MySQLDSN, "postgres": storeenv.PostgresURL, "zookeeper": storeenv.ZooKeeperServers, "etcd": storeenv.EtcdEndpoints}
	want := map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		env, ok := names[s]
		if !ok {
			fmt.Fprintf(os.Stderr, "withstores: unknown store %q in -only\n", s)
			return 2
		}
		want[env] = true
	}
	env := os.Environ()
	var started []string
	for _, st := range stores {
		if len(want) > 0 && !want[st.env] {
			continue
		}
		began := time.Now()
		if os.Getenv(st.env) != "" {
			continue // the user's server, passed on unchanged
		}
		v, err := st.start()
		if err != nil {
			if warning, ok := testenv.Unavailability(err); ok {
				fmt.Fprintf(os.Stderr, "withstores: %s left unset: %s\n", st.env, warning)
				continue
			}
			fmt.Fprintf(os.Stderr, "withstores: %s: %v\n", st.env, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "withstores: %s ready in %v\n", st.env, time.Since(began).Round(time.Millisecond))
		env = append(env, st.env+"="+v)
		started = append(started, st.env)
	}
	env = append(env, storeenv.Started+"="+strings.Join(started, ","))

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Signals go on to the command; this process outlives it to stop the
	// servers.
	wait, err := child.Start(cmd)
	code := 1
	if err == nil {
		code, err = wait()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "withstores: %v\n", err)
	}
	return code
}
