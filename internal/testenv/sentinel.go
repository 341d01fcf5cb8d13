package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// SentinelMaster is the name under which the sentinels of a
// [RedisSentinelServer] monitor its primary.
const SentinelMaster = "locker-test"

// sentinels is the number of sentinels of a RedisSentinelServer; a quorum
// of two of them declares the primary down.
const sentinels = 3

// RedisSentinelServer is a Redis primary with one replica and three
// sentinels monitoring them, all on loopback, for tests that fail over.
type RedisSentinelServer struct {
	primary, replica string
	sentinels        []string

	ps procSet
}

// SentinelAddrs returns the sentinels' addresses (host:port); the caller
// may modify the returned slice.
func (s *RedisSentinelServer) SentinelAddrs() []string { return append([]string(nil), s.sentinels...) }

// DataAddrs returns the addresses of the two data nodes: the first primary
// and its replica (which is the primary after one failover).
func (s *RedisSentinelServer) DataAddrs() []string { return []string{s.primary, s.replica} }

// NewRedisSentinel starts, for this test only, a primary, a replica and
// three sentinels (redis-server in sentinel mode) monitoring them as
// [SentinelMaster], with a down-after of one second; it returns once every
// sentinel knows the replica and the other sentinels, so that a SENTINEL
// FAILOVER can proceed. It needs the redis-server binary.
func NewRedisSentinel(t testing.TB) *RedisSentinelServer {
	t.Helper()
	return dedicatedBinary(t, "redis sentinel", redisInstall, []string{"redis-server"}, func(p []string) (*RedisSentinelServer, func(), error) {
		return redisSentinelBinary(p[0])
	})
}

// redisSentinelBinary starts the primary, the replica and the sentinels.
func redisSentinelBinary(server string) (*RedisSentinelServer, func(), error) {
	dir, err := tempDir("redis-sentinel")
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var procs []*process
	fail := func(err error) (*RedisSentinelServer, func(), error) {
		stopAll(procs)
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("redis sentinel: %w", err)
	}
	// start runs one redis-server of the deployment (startRedisNode).
	start := func(name string, args func(port int, dir string) ([]string, error)) (string, error) {
		p, addr, err := startRedisNode(ctx, server, dir, name, 1, func(ports []int, d string) ([]string, error) {
			return args(ports[0], d)
		})
		if err == nil {
			procs = append(procs, p)
		}
		return addr, err
	}
	primary, err := start("primary", func(port int, d string) ([]string, error) { return redisArgs(port, d), nil })
	if err != nil {
		return fail(err)
	}
	_, primaryPort, _ := net.SplitHostPort(primary)
	replica, err := start("replica", func(port int, d string) ([]string, error) {
		return redisArgs(port, d, "--replicaof", "127.0.0.1", primaryPort), nil
	})
	if err != nil {
		return fail(err)
	}
	if err := waitReady(ctx, procs[1], func(ctx context.Context) error {
		return infoHas(ctx, replica, "replication", "master_link_status:up")
	}); err != nil {
		return fail(err)
	}
	var sents []string
	for i := range sentinels {
		addr, err := start("sentinel"+strconv.Itoa(i), func(port int, d string) ([]string, error) {
			conf := filepath.Join(d, "sentinel.conf")
			text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
				"sentinel monitor %s 127.0.0.1 %s 2\n"+
				"sentinel down-after-milliseconds %s 1000\n"+
				"sentinel failover-timeout %s 10000\n"+
				"sentinel parallel-syncs %s 1\n",
				port, d, SentinelMaster, primaryPort, SentinelMaster, SentinelMaster, SentinelMaster)
			if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
				return nil, err
			}
			return []string{conf, "--sentinel"}, nil
		})
		if err != nil {
			return fail(err)
		}
		sents = append(sents, addr)
	}
	// Every sentinel must know the replica and its peers (they discover
	// each other through the primary, every two seconds).
	want := fmt.Sprintf("slaves=1,sentinels=%d", sentinels)
	for i, addr := range sents {
		if err := waitReady(ctx, procs[2+i], func(ctx context.Context) error {
			return infoHas(ctx, addr, "sentinel", want)
		}); err != nil {
			return fail(err)
		}
	}
	s := &RedisSentinelServer{primary: primary, replica: replica, sentinels: sents, ps: newProcSet(procs...)}
	return s, func() {
		s.ps.stop()
		_ = os.RemoveAll(dir)
	}, nil
}

// infoHas checks that INFO section of the server at addr contains want.
func infoHas(ctx context.Context, addr, section, want string) error {
	info, err := respDo(ctx, addr, "INFO", section)
	if err != nil {
		return err
	}
	if !strings.Contains(info, want) {
		return fmt.Errorf("INFO %s of %s lacks %q", section, addr, want)
	}
	return nil
}
