package testenv

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// NewRedisMasters returns n independent redis-servers for this test only
// (Redlock masters: no replication between them), each started from the
// redis-server binary on a free loopback port and stopped when the test
// ends. Only binaries can provide them: the environment names one server
// at most. Each can be restarted ([RedisServer.Restart]) or killed and
// started again ([RedisServer.Kill], [RedisServer.Start]).
func NewRedisMasters(t testing.TB, n int) []*RedisServer {
	t.Helper()
	ss := make([]*RedisServer, n)
	for i := range ss {
		ss[i] = dedicatedBinary(t, "redis", redisInstall, []string{"redis-server"}, func(p []string) (*RedisServer, func(), error) {
			return redisBinary(p[0], nil)
		})
	}
	return ss
}

// Kill stops the server with SIGKILL, as a crash would, and returns once it
// has exited; [RedisServer.Start] starts it again. Only a server started
// from a binary can be killed: otherwise Kill skips the test.
func (s *RedisServer) Kill(t testing.TB) {
	t.Helper()
	procs := s.procs(t, "kill")
	s.ps.mu.Lock()
	defer s.ps.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
}

// procs returns the server's processes, or skips t (saying it cannot do
// what) when it has none: it was not started from a binary.
func (s *RedisServer) procs(t testing.TB, what string) []*process {
	t.Helper()
	if len(s.ps.procs) == 0 {
		t.Skipf("testenv: cannot %s the redis server at %s from %s", what, s.addr, s.origin)
	}
	return s.ps.procs
}

// Start starts a server stopped by [RedisServer.Kill] again on the same
// address, with an empty dataset, and returns when it answers. It fails the
// test when the server does not come back.
func (s *RedisServer) Start(t testing.TB) {
	t.Helper()
	procs := s.procs(t, "start")
	s.ps.mu.Lock()
	defer s.ps.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for _, p := range procs {
		select {
		case <-p.done():
		default:
			continue // still running
		}
		if err := startReady(ctx, p, func(ctx context.Context) error { return redisPing(ctx, s.addr) }); err != nil {
			t.Fatalf("testenv: start the redis server at %s: %v", s.addr, err)
		}
	}
}

// kill sends SIGKILL to the process and returns after it has exited. It is
// a no-op when the process is not running.
func (p *process) kill() {
	exited := p.done()
	if exited == nil {
		return
	}
	p.mu.Lock()
	proc := p.cmd.Process
	p.mu.Unlock()
	_ = proc.Kill() // fails harmlessly when it has exited already
	<-exited
}

// RestartRedisMasters restarts servers together, as a power cut of every
// master would: all are stopped (SIGTERM, then SIGKILL after a grace
// period) before any starts again, each with an empty dataset. It returns
// once all answer, and fails the test when one does not come back.
// Restarting them one after the other instead would let a lock taken
// meanwhile lose its quorum to the later restarts.
func RestartRedisMasters(t testing.TB, servers []*RedisServer) {
	t.Helper()
	var procs []*process
	for _, s := range servers {
		procs = append(procs, s.procs(t, "restart")...)
	}
	stopAll(procs)
	for _, s := range servers {
		s.Start(t)
	}
}

// AwaitRedisUptime waits until every server has been up for d (INFO
// server's uptime_in_seconds): a Redlock master grants nothing for its
// restart delay after it starts (redis.RedlockConfig.RestartDelay). It fails
// the test when a server does not say.
func AwaitRedisUptime(t testing.TB, servers []*RedisServer, d time.Duration) {
	t.Helper()
	for _, s := range servers {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
			fields, err := respFields(ctx, s.addr, "INFO", "server")
			cancel()
			if err != nil {
				t.Fatalf("testenv: INFO server of %s: %v", s.addr, err)
			}
			up, err := strconv.Atoi(fields["uptime_in_seconds"])
			if err != nil {
				t.Fatalf("testenv: INFO server of %s: uptime_in_seconds %q", s.addr, fields["uptime_in_seconds"])
			}
			left := d - time.Duration(up)*time.Second
			if left <= 0 {
				break
			}
			time.Sleep(left)
		}
	}
}
