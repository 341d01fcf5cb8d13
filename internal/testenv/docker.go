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

// containerSpec describes a container to run with its ports published on
// 127.0.0.1.
type containerSpec struct {
	image string
	// ports are the container ports ("6379/tcp") to publish, each on the host
	// port of the same index in hostPorts, or on a random one when hostPorts
	// is nil.
	ports     []string
	hostPorts []int
	opts      []testcontainers.ContainerCustomizer
}

// runContainer starts the container and returns it with the host:port of each
// published port. The caller terminates it with terminateContainer.
func runContainer(ctx context.Context, spec containerSpec) (*testcontainers.DockerContainer, []string, error) {
	loopback := netip.MustParseAddr("127.0.0.1")
	bind := func(hc *container.HostConfig) {
		if hc.PortBindings == nil {
			hc.PortBindings = network.PortMap{}
		}
		for i, p := range spec.ports {
			hostPort := ""
			if spec.hostPorts != nil {
				hostPort = strconv.Itoa(spec.hostPorts[i])
			}
			hc.PortBindings[network.MustParsePort(p)] = []network.PortBinding{{HostIP: loopback, HostPort: hostPort}}
		}
	}
	opts := append([]testcontainers.ContainerCustomizer{
		testcontainers.WithExposedPorts(spec.ports...),
		testcontainers.WithHostConfigModifier(bind),
	}, spec.opts...)

	c, err := testcontainers.Run(ctx, spec.image, opts...)
	if err != nil {
		if c != nil {
			terminateContainer(c)
		}
		return nil, nil, fmt.Errorf("run container %s: %w", spec.image, err)
	}
	addrs := make([]string, len(spec.ports))
	for i, p := range spec.ports {
		mapped, err := c.MappedPort(ctx, p)
		if err != nil {
			terminateContainer(c)
			return nil, nil, fmt.Errorf("container %s: port %s: %w", spec.image, p, err)
		}
		addrs[i] = net.JoinHostPort("127.0.0.1", mapped.Port())
	}
	return c, addrs, nil
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
