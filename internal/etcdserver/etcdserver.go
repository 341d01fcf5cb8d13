// Package etcdserver runs real etcd servers inside the current process, with
// go.etcd.io/etcd/server/v3/embed: a single member ([Start]) or a cluster of
// several members ([StartCluster]) whose members can be stopped and started
// again to exercise leader elections.
//
// Every member listens on free 127.0.0.1 ports below the kernel's ephemeral
// range (no other process's connection takes a stopped member's port) and
// keeps its data in a directory of its own; its logs are discarded unless
// [Config.LogFile] names a file. The servers are real etcd: the same Raft, MVCC store, leases and
// watches as a production deployment, only without TLS or authentication.
//
// It serves the etcd backend's tests and is the default store of the cron
// example, which runs without any installation.
//
//	srv, err := etcdserver.Start(ctx, etcdserver.Config{})
//	if err != nil { ... }
//	defer srv.Close()
//	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints()})
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/golocker/locker/internal/freeport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Defaults of [Config].
const (
	// DefaultTick is the Raft heartbeat interval of the members.
	DefaultTick = 50 * time.Millisecond
	// DefaultElection is the Raft election timeout. With DefaultTick it
	// gives an etcd minimum lease TTL of 1 s (etcd's own defaults, 100 ms and
	// 1 s, give 2 s).
	DefaultElection = 500 * time.Millisecond
	// DefaultStartTimeout bounds a start when the caller's ctx has no
	// earlier deadline.
	DefaultStartTimeout = 30 * time.Second
)

// Config configures the servers. The zero value is ready to use.
type Config struct {
	// Dir is the directory that holds the members' data directories, one
	// per member, named after it (m0, m1, …). Empty means a fresh temporary
	// directory, removed by Close. A Dir given here is left in place, and a
	// single member started again on it finds its data (keys, revisions)
	// from the earlier run. (A cluster of several members cannot restart
	// from an earlier run's directories: its members would get new ports.)
	Dir string

	// LogFile, when not empty, receives the servers' logs (one JSON object per
	// line, info level and above). Empty discards them.
	LogFile string

	// Fsync makes the members sync their writes to disk as a production etcd
	// does. The default skips fsync: much faster, and nothing is lost when
	// the process stops or crashes, only when the machine does.
	Fsync bool

	// Tick and Election are the Raft heartbeat interval and election timeout
	// (defaults DefaultTick and DefaultElection). etcd's minimum lease TTL
	// is 1.5 × Election rounded up to whole seconds.
	Tick, Election time.Duration

	// ClientTLS, when set, makes the members serve clients over TLS
	// (https endpoints) with these PEM files.
	ClientTLS *TLSFiles
}

// TLSFiles names the PEM files of a TLS endpoint.
type TLSFiles struct {
	CertFile, KeyFile string
	// TrustedCAFile, when set, makes the server require client
	// certificates signed by this CA.
	TrustedCAFile string
}

// Server is one etcd member running in this process. Its methods are safe
// for concurrent use.
type Server struct {
	name      string
	dir       string // data directory
	clientURL url.URL
	peerURL   url.URL
	cluster   string // initial cluster: name=peerURL,...
	token     string
	cfg       Config
	ownDir    string // temporary directory to remove on Close, if any

	mu      sync.Mutex
	etcd    *embed.Etcd // nil while stopped
	started bool        // started at least once: data exists
	closed  bool
}

// Start starts a single-member etcd and returns when it serves requests. The
// start is bounded by ctx and by [DefaultStartTimeout].
func Start(ctx context.Context, cfg Config) (*Server, error) {
	c, err := StartCluster(ctx, 1, cfg)
	if err != nil {
		return nil, err
	}
	s := c.members[0]
	s.ownDir = c.ownDir
	return s, nil
}

// Name returns the member's name (m0, m1, …).
func (s *Server) Name() string { return s.name }

// Endpoint returns the member's client URL (http://127.0.0.1:port). The port
// stays the same across Stop and Restart.
func (s *Server) Endpoint() string { return s.clientURL.String() }

// Endpoints returns the member's client URL as a list, the shape that
// clientv3.Config.Endpoints takes.
func (s *Server) Endpoints() []string { return []string{s.Endpoint()} }

// Dir returns the member's data directory.
func (s *Server) Dir() string { return s.dir }

// Running reports whether the member is started.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.etcd != nil
}

// IsLeader reports whether the member is running and is the Raft leader.
func (s *Server) IsLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd == nil {
		return false
	}
	srv := s.etcd.Server
	return srv.Leader() == srv.MemberID()
}

// Stop stops the member, keeping its data. Clients see their connections
// fail; the other members of a cluster elect a new leader when it led.
// Stopping a stopped member does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	return nil
}

func (s *Server) stopLocked() {
	if s.etcd == nil {
		return
	}
	s.etcd.Close()
	<-s.etcd.Server.StopNotify()
	s.etcd = nil
}

// Restart stops the member if it runs and starts it again on the same data
// directory and ports, and returns when it serves requests (for a cluster
// member: once it rejoined a cluster that has a leader). The data, hence the
// revisions, survive.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("etcdserver: restart of a closed server")
	}
	s.stopLocked()
	ctx, cancel := startContext(ctx)
	defer cancel()
	// The ports were ours a moment ago; retry briefly in case the kernel has
	// not released them yet.
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.launchLocked(); err == nil || !isAddrInUse(err) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdserver: restart %s: %w", s.name, errors.Join(err, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("etcdserver: restart %s: %w", s.name, err)
	}
	return s.waitReadyLocked(ctx)
}

// Close stops the member and removes its temporary directory, if Start
// created one. Calls after the first return nil.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.stopLocked()
	if s.ownDir != "" {
		if err := os.RemoveAll(s.ownDir); err != nil {
			return fmt.Errorf("etcdserver: remove %s: %w", s.ownDir, err)
		}
	}
	return nil
}

// launchLocked starts the member without waiting for it to be ready.
func (s *Server) launchLocked() error {
	ec := embed.NewConfig()
	ec.Name = s.name
	ec.Dir = s.dir
	ec.ListenClientUrls = []url.URL{s.clientURL}
	ec.AdvertiseClientUrls = []url.URL{s.clientURL}
	ec.ListenPeerUrls = []url.URL{s.peerURL}
	ec.AdvertisePeerUrls = []url.URL{s.peerURL}
	ec.InitialCluster = s.cluster
	ec.InitialClusterToken = s.token
	ec.ClusterState = embed.ClusterStateFlagNew
	if s.started {
		ec.ClusterState = embed.ClusterStateFlagExisting
	}
	ec.TickMs = uint(s.cfg.Tick / time.Millisecond)
	ec.ElectionMs = uint(s.cfg.Election / time.Millisecond)
	ec.UnsafeNoFsync = !s.cfg.Fsync
	// bcrypt.MinCost: test users' passwords need no strength, and the
	// default cost makes each authentication slow under -race.
	ec.BcryptCost = 4
	ec.EnableGRPCGateway = false
	if t := s.cfg.ClientTLS; t != nil {
		ec.ClientTLSInfo.CertFile = t.CertFile
		ec.ClientTLSInfo.KeyFile = t.KeyFile
		ec.ClientTLSInfo.TrustedCAFile = t.TrustedCAFile
		ec.ClientTLSInfo.ClientCertAuth = t.TrustedCAFile != ""
	}
	ec.Metrics = "basic"
	// Keep a stopped member's catch-up cheap.
	ec.SnapshotCount = 10000
	if s.cfg.LogFile != "" {
		ec.Logger = "zap"
		ec.LogLevel = "info"
		ec.LogOutputs = []string{s.cfg.LogFile}
	} else {
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return err
	}
	s.etcd = e
	s.started = true
	return nil
}

// waitReadyLocked waits until the member serves requests.
func (s *Server) waitReadyLocked(ctx context.Context) error {
	e := s.etcd
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		s.stopLocked()
		return fmt.Errorf("etcdserver: %s failed to start: %w", s.name, err)
	case <-e.Server.StopNotify():
		s.stopLocked()
		return fmt.Errorf("etcdserver: %s stopped while starting", s.name)
	case <-ctx.Done():
		s.stopLocked()
		return fmt.Errorf("etcdserver: %s not ready: %w", s.name, ctx.Err())
	}
}

// Cluster is a set of etcd members running in this process. Its methods are
// safe for concurrent use.
type Cluster struct {
	members []*Server
	ownDir  string
}

// StartCluster starts an n-member cluster and returns when every member serves
// requests. The start is bounded by ctx and by [DefaultStartTimeout].
func StartCluster(ctx context.Context, n int, cfg Config) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcdserver: cluster of %d members", n)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Election <= 0 {
		cfg.Election = DefaultElection
	}
	if cfg.Election < 5*cfg.Tick {
		return nil, fmt.Errorf("etcdserver: election timeout %v below 5 ticks of %v", cfg.Election, cfg.Tick)
	}
	ctx, cancel := startContext(ctx)
	defer cancel()

	c := &Cluster{}
	root := cfg.Dir
	if root == "" {
		d, err := os.MkdirTemp("", "locker-etcd-")
		if err != nil {
			return nil, fmt.Errorf("etcdserver: %w", err)
		}
		root, c.ownDir = d, d
	}
	// A port found free may be taken before etcd binds it: try again with
	// other ports (etcd binds its ports before it writes any data).
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = c.start(ctx, n, cfg, root); err == nil || !isAddrInUse(err) {
			break
		}
	}
	if err != nil {
		if c.ownDir != "" {
			os.RemoveAll(c.ownDir)
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, n int, cfg Config, dir string) error {
	ports, err := freeport.Ports(2 * n)
	if err != nil {
		return err
	}
	token := fmt.Sprintf("locker-%d-%d", os.Getpid(), time.Now().UnixNano())
	members := make([]*Server, n)
	peers := make([]string, n)
	for i := range members {
		s := &Server{
			name:      fmt.Sprintf("m%d", i),
			clientURL: url.URL{Scheme: clientScheme(cfg), Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			peerURL:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
			token:     token,
			cfg:       cfg,
		}
		s.dir = filepath.Join(dir, s.name)
		members[i] = s
		peers[i] = s.name + "=" + s.peerURL.String()
	}
	cluster := strings.Join(peers, ",")
	stopAll := func() {
		for _, s := range members {
			s.mu.Lock()
			s.stopLocked()
			s.mu.Unlock()
		}
	}
	for _, s := range members {
		s.cluster = cluster
		s.mu.Lock()
		err := s.launchLocked()
		s.mu.Unlock()
		if err != nil {
			stopAll()
			return fmt.Errorf("etcdserver: start %s: %w", s.name, err)
		}
	}
	for _, s := range members {
		s.mu.Lock()
		err := s.waitReadyLocked(ctx)
		s.mu.Unlock()
		if err != nil {
			stopAll()
			return err
		}
	}
	c.members = members
	return nil
}

// Members returns the members, in a fixed order.
func (c *Cluster) Members() []*Server { return append([]*Server(nil), c.members...) }

// Endpoints returns every member's client URL, running or not.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, s := range c.members {
		eps[i] = s.Endpoint()
	}
	return eps
}

// Leader waits until a running member is the Raft leader and returns it. It
// fails when ctx ends first (for example when no quorum is running).
func (c *Cluster) Leader(ctx context.Context) (*Server, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		for _, s := range c.members {
			if s.IsLeader() {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcdserver: no leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops every member and removes the temporary directory, if
// StartCluster created one. Calls after the first return nil.
func (c *Cluster) Close() error {
	var wg sync.WaitGroup
	for _, s := range c.members {
		wg.Go(func() {
			s.mu.Lock()
			s.closed = true
			s.stopLocked()
			s.mu.Unlock()
		})
	}
	wg.Wait()
	if c.ownDir != "" {
		dir := c.ownDir
		c.ownDir = ""
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("etcdserver: remove %s: %w", dir, err)
		}
	}
	return nil
}

func startContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, DefaultStartTimeout)
}

func isAddrInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}

// clientScheme is the scheme of the client URLs: https with ClientTLS.
func clientScheme(cfg Config) string {
	if cfg.ClientTLS != nil {
		return "https"
	}
	return "http"
}
