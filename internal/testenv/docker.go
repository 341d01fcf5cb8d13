package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
)

// dockerProbeTimeout bounds the whole Docker probe.
const dockerProbeTimeout = time.Second

// dockerOnce remembers the probe's answer for the test binary.
var dockerOnce = sync.OnceValues(probeDocker)

// DockerAvailable reports whether a Docker engine answers, so that servers can
// be started as containers. The probe dials DOCKER_HOST (or the usual socket
// paths) and sends GET /_ping, all within one second, before any
// testcontainers API is called; its answer is remembered for the test binary.
// It answers false when LOCKER_NO_DOCKER is true.
func DockerAvailable() bool {
	ok, _ := dockerStatus()
	return ok
}

// dockerStatus returns the probe's answer and, when false, why.
// LOCKER_NO_DOCKER is read on every call, so a test can turn Docker off.
func dockerStatus() (bool, error) {
	if off, _ := strconv.ParseBool(os.Getenv(EnvNoDocker)); off {
		return false, fmt.Errorf("disabled by %s", EnvNoDocker)
	}
	return dockerOnce()
}

// probeDocker finds the Docker endpoint and pings it.
func probeDocker() (bool, error) {
	netw, addr, tlsOnly, err := dockerEndpoint()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerProbeTimeout)
	defer cancel()
	if err := pingDocker(ctx, netw, addr, tlsOnly); err != nil {
		return false, err
	}
	return true, nil
}

// dockerEndpoint returns where the Docker engine should listen. tlsOnly means
// the engine speaks TLS, which the probe does not: a TCP connect then counts
// as an answer.
func dockerEndpoint() (netw, addr string, tlsOnly bool, err error) {
	if host := os.Getenv("DOCKER_HOST"); host != "" {
		u, err := url.Parse(host)
		if err != nil {
			return "", "", false, fmt.Errorf("parse DOCKER_HOST %q: %w", host, err)
		}
		switch u.Scheme {
		case "unix":
			return "unix", u.Path, false, nil
		case "tcp":
			return "tcp", u.Host, os.Getenv("DOCKER_TLS_VERIFY") != "" || os.Getenv("DOCKER_CERT_PATH") != "", nil
		default:
			return "", "", false, fmt.Errorf("DOCKER_HOST %q: scheme %q not supported by the probe", host, u.Scheme)
		}
	}
	candidates := []string{"/var/run/docker.sock"}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		candidates = append(candidates, filepath.Join(d, "docker.sock"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates,
			filepath.Join(home, ".docker", "run", "docker.sock"),
			filepath.Join(home, ".docker", "desktop", "docker.sock"))
	}
	for _, p := range candidates {
		if _, err := os.Stat(p); err == nil {
			return "unix", p, false, nil
		}
	}
	return "", "", false, errors.New("DOCKER_HOST is unset and no Docker socket exists")
}

// pingDocker sends GET /_ping to the engine and expects 200 OK.
func pingDocker(ctx context.Context, netw, addr string, tlsOnly bool) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, netw, addr)
	if err != nil {
		return fmt.Errorf("dial docker engine: %w", err)
	}
	if tlsOnly {
		return conn.Close()
	}
	_ = conn.Close()

	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, netw, addr)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("ping docker engine: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ping docker engine: %s", resp.Status)
	}
	return nil
}

// dockerHostNetwork reports whether containers run in the host's network
// (LOCKER_DOCKER_NETWORK=host) instead of Docker's default bridge network.
func dockerHostNetwork() (bool, error) {
	switch v := strings.TrimSpace(os.Getenv(EnvDockerNetwork)); v {
	case "", "bridge":
		return false, nil
	case "host":
		return true, nil
	default:
		return false, fmt.Errorf("%s=%q: want bridge or host", EnvDockerNetwork, v)
	}
}

// containerSpec describes a container whose server listens on TCP ports.
//
// The ports are chosen free on the host, and the server listens on the same
// ports inside the container: a container stopped and started again keeps
// its address, and servers that announce their address announce the right
// one. On the bridge network (the default) they are published on 127.0.0.1.
// On the host network (LOCKER_DOCKER_NETWORK=host) nothing is published: the
// server listens on the host's ports, on 127.0.0.1 only.
type containerSpec struct {
	image string
	// nports is the number of ports the server listens on; only the first
	// publish of them are reached from the host (the others, such as a
	// cluster bus, are internal).
	nports  int
	publish int
	// opts returns the container's options for a server listening on ports,
	// on 127.0.0.1 only when loopback is true.
	opts func(ports []int, loopback bool) []testcontainers.ContainerCustomizer
	// ready checks that the server answers at addrs (host:port of each
	// published port), within readyWithin.
	ready       func(ctx context.Context, addrs []string) error
	readyWithin time.Duration
}

// startContainer runs the container and waits until its server is ready. It
// returns the host:port of each published port, and the container, which
// the caller removes with terminateContainer. Every container runs with an
// init process (docker run --init), so that it stops at once even when its
// main process is a shell. A server that exits during startup is tried
// again on other ports.
func startContainer(spec containerSpec) ([]string, testcontainers.Container, error) {
	host, err := dockerHostNetwork()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), containerTimeout)
	defer cancel()
	var (
		addrs []string
		c     testcontainers.Container
	)
	err = retryPorts(spec.nports, func(ports []int) error {
		var err error
		addrs, c, err = tryContainer(ctx, spec, ports, host)
		return err
	})
	return addrs, c, err
}

// tryContainer is one attempt of startContainer on ports.
func tryContainer(ctx context.Context, spec containerSpec, ports []int, host bool) ([]string, testcontainers.Container, error) {
	published := ports[:spec.publish]
	names := make([]string, len(published))
	for i, p := range published {
		names[i] = strconv.Itoa(p) + "/tcp"
	}
	loopback := netip.MustParseAddr("127.0.0.1")
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.Init = new(true)
			if host {
				hc.NetworkMode = container.NetworkMode(network.NetworkHost)
				return
			}
			if hc.PortBindings == nil {
				hc.PortBindings = network.PortMap{}
			}
			for i, name := range names {
				hostPort := strconv.Itoa(published[i])
				hc.PortBindings[network.MustParsePort(name)] = []network.PortBinding{{HostIP: loopback, HostPort: hostPort}}
			}
		}),
	}
	if host {
		// A container in the host's network joins no other network (not
		// even the one testcontainers makes when the engine has no bridge).
		opts = append(opts, testcontainers.WithEndpointSettingsModifier(func(m map[string]*network.EndpointSettings) { clear(m) }))
	} else {
		opts = append(opts, testcontainers.WithExposedPorts(names...))
	}
	opts = append(opts, spec.opts(ports, host)...)

	c, err := testcontainers.Run(ctx, spec.image, opts...)
	if err != nil {
		if c != nil {
			terminateContainer(c)
		}
		return nil, nil, fmt.Errorf("run container %s: %w", spec.image, err)
	}
	addrs := make([]string, len(published))
	for i, p := range published {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	if err := waitContainer(ctx, c, spec.readyWithin, func(ctx context.Context) error { return spec.ready(ctx, addrs) }); err != nil {
		err = fmt.Errorf("container %s: %w; log:\n%s", spec.image, err, containerLogTail(c))
		terminateContainer(c)
		return nil, nil, err
	}
	return addrs, c, nil
}

// waitContainer polls probe until it succeeds, the container exits (an
// error wrapping errExited) or timeout passes.
func waitContainer(ctx context.Context, c testcontainers.Container, timeout time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last := probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		if st, err := c.State(ctx); err == nil && !st.Running {
			return fmt.Errorf("%w (exit code %d; last probe: %v)", errExited, st.ExitCode, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last probe: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// terminateContainer removes c, bounded in time.
func terminateContainer(c testcontainers.Container) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.Terminate(ctx)
}

// containerLogTail returns the end of a container's log, for error messages.
func containerLogTail(c testcontainers.Container) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := c.Logs(ctx)
	if err != nil {
		return "\t(no log: " + err.Error() + ")"
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return indent(string(b))
}

// restartContainer stops c and starts it again, then waits until every
// probe succeeds, within timeout. The container keeps its file system (and
// so the server's data directory) and its ports.
func restartContainer(c testcontainers.Container, timeout time.Duration, probes []func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	grace := stopTimeout
	if err := c.Stop(ctx, &grace); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	for _, probe := range probes {
		if err := waitContainer(ctx, c, timeout, probe); err != nil {
			return fmt.Errorf("%w; log:\n%s", err, containerLogTail(c))
		}
	}
	return nil
}
