package etcdserver

import (
	"context"
	"errors"
	"io/fs"
	"net/url"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/golocker/locker/internal/freeport"
	"github.com/golocker/locker/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}

func newClient(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// startCluster starts a 3-member cluster that the test's end closes.
func startCluster(ctx context.Context, t *testing.T) *Cluster {
	t.Helper()
	c, err := StartCluster(ctx, 3, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestSingleRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	srv, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli := newClient(t, srv.Endpoints())
	put, err := cli.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	if !srv.IsLeader() {
		t.Error("a single member must lead")
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	get, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(get.Kvs) != 1 || get.Kvs[0].CreateRevision != put.Header.Revision {
		t.Fatalf("after restart got %v, want k created at %d", get.Kvs, put.Header.Revision)
	}
	dir := srv.ownDir
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if dir == "" {
		t.Fatal("no temporary directory recorded")
	}
}

func TestClusterLeaderStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := startCluster(ctx, t)
	cli := newClient(t, c.Endpoints())
	if _, err := cli.Put(ctx, "k", "1"); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Stop(); err != nil {
		t.Fatal(err)
	}
	next, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatal("stopped member still leads")
	}
	if _, err := cli.Put(ctx, "k", "2"); err != nil {
		t.Fatal(err)
	}
	if err := leader.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	one := newClient(t, leader.Endpoints())
	// A linearizable read through the restarted member sees the write made
	// while it was down.
	get, err := one.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "2" {
		t.Fatalf("restarted member reads %v, want k=2", get.Kvs)
	}
}

// TestDirReused: a single member started again on the same Dir finds its
// data, as the cron example's embedded store does across runs.
func TestDirReused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	srv, err := Start(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cli := newClient(t, srv.Endpoints())
	put, err := cli.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	srv, err = Start(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	get, err := newClient(t, srv.Endpoints()).Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(get.Kvs) != 1 || get.Kvs[0].CreateRevision != put.Header.Revision {
		t.Fatalf("second run reads %v, want k created at %d", get.Kvs, put.Header.Revision)
	}
}

// TestPortsBelowEphemeralRange checks that a member's ports lie below the
// kernel's ephemeral range: a stopped member's port there could become the
// local port of another process's outgoing connection, and the member's
// restart failed with "address already in use" while that connection lived
// (CI: integration/etcd TestClusterLeaderFailover).
func TestPortsBelowEphemeralRange(t *testing.T) {
	low, high, err := freeport.EphemeralRange()
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no ephemeral port range to check against: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if low-freeport.LowestPort < freeport.MinSpan {
		t.Skipf("the ephemeral range %d-%d leaves no room below it", low, high)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := startCluster(ctx, t)
	for _, s := range c.Members() {
		for _, u := range []url.URL{s.clientURL, s.peerURL} {
			p, err := strconv.Atoi(u.Port())
			if err != nil {
				t.Fatal(err)
			}
			if p < freeport.LowestPort || p >= low {
				t.Errorf("%s listens on %s: port %d is not in %d-%d, below the ephemeral range %d-%d", s.Name(), u.String(), p, freeport.LowestPort, low-1, low, high)
			}
		}
	}
}
