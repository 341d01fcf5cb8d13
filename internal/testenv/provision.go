package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// source says how one kind of server can be had. provision tries its ways in
// the package's order: environment variable, Docker, binaries on PATH.
type source[S any] struct {
	what    string // "redis", "zookeeper", …
	env     string // the environment variable naming an endpoint
	install string // the command that installs the binaries

	// fromEnv uses the endpoint the environment variable names.
	fromEnv func(value string) (S, func(), error)
	// container starts a container (only called when Docker answers).
	container func() (S, func(), error)
	// binaries names the programs to look up on PATH (or returns an error
	// saying what is missing), and start starts the server with their paths.
	binaries func() ([]string, error)
	start    func(paths []string) (S, func(), error)
}

// The ways a server can be had, as LOCKER_TESTENV names them.
const (
	viaEnv    = "env"
	viaDocker = "docker"
	viaBinary = "binary"
)

// onlyWay returns the one way LOCKER_TESTENV allows, or "" for the default
// order.
func onlyWay() (string, error) {
	switch v := strings.TrimSpace(os.Getenv(EnvTestenv)); v {
	case "", viaEnv, viaDocker, viaBinary:
		return v, nil
	default:
		return "", fmt.Errorf("%s=%q: want %s, %s or %s", EnvTestenv, v, viaEnv, viaDocker, viaBinary)
	}
}

// provision finds a server as the package doc describes. A way that
// LOCKER_TESTENV asks for and that cannot serve fails, even outside CI; so
// does, under CI, a container that does not start although Docker answers:
// it must not hide behind the binaries.
func (src source[S]) provision() (S, func(), error) { return src.provisionWith(dockerStatus, false) }

// provisionOwn is provision for a server of the caller's own, which it may
// restart: the endpoint variable is passed over for Docker and the binaries,
// and used only when LOCKER_TESTENV=env asks for it or when neither of the
// others can serve.
func (src source[S]) provisionOwn() (S, func(), error) { return src.provisionWith(dockerStatus, true) }

// provisionWith is provision (or provisionOwn, with own) with docker telling
// whether Docker answers.
func (src source[S]) provisionWith(docker func() (bool, error), own bool) (S, func(), error) {
	var zero S
	only, err := onlyWay()
	if err != nil {
		return zero, nil, fmt.Errorf("%s: %w", src.what, err)
	}
	v := os.Getenv(src.env)
	switch only {
	case viaEnv:
		if v == "" {
			return zero, nil, fmt.Errorf("%s: %s=%s and %s is unset", src.what, EnvTestenv, only, src.env)
		}
		return src.fromEnv(v)
	case viaDocker:
		if ok, why := docker(); !ok {
			return zero, nil, fmt.Errorf("%s: %s=%s and no Docker engine answers: %w", src.what, EnvTestenv, only, why)
		}
		s, stop, err := src.container()
		if err != nil {
			return zero, nil, fmt.Errorf("%s: %s=%s: %w", src.what, EnvTestenv, only, err)
		}
		return s, stop, nil
	case viaBinary:
		paths, err := src.binaries()
		if err != nil {
			return zero, nil, fmt.Errorf("%s: %s=%s: %w (install with %s)", src.what, EnvTestenv, only, err, src.install)
		}
		return src.start(paths)
	}

	if v != "" && !own {
		return src.fromEnv(v)
	}
	var reasons []string
	if ok, why := docker(); ok {
		s, stop, err := src.container()
		if err == nil {
			return s, stop, nil
		}
		if CI() {
			return zero, nil, fmt.Errorf("%s: Docker answers but the container failed (no fallback to binaries under CI): %w", src.what, err)
		}
		reasons = append(reasons, "docker: "+err.Error())
	} else {
		reasons = append(reasons, "docker: "+why.Error())
	}
	paths, err := src.binaries()
	if err != nil {
		if v != "" {
			// Not a server of the caller's own: its Restart cannot serve.
			return src.fromEnv(v)
		}
		reasons = append(reasons, err.Error())
		return zero, nil, &unavailableError{
			what:    src.what,
			install: src.install + " (or set " + src.env + ")",
			err:     errors.New(strings.Join(reasons, "; ")),
		}
	}
	return src.start(paths)
}

// lookPaths finds programs on PATH, naming every one that is missing.
func lookPaths(names ...string) ([]string, error) {
	paths := make([]string, len(names))
	var errs []error
	for i, n := range names {
		p, err := exec.LookPath(n)
		paths[i] = p
		errs = append(errs, err)
	}
	return paths, errors.Join(errs...)
}

// sharedServer returns the server of this kind shared by the test binary,
// or skips or fails t.
func sharedServer[S any](t testing.TB, name string, start func() (S, func(), error)) S {
	t.Helper()
	s, err := shared(name, start)
	if err != nil {
		report(t, err)
	}
	return s
}

// dedicatedBinary is dedicatedServer for a server only binaries can provide
// (one started with options the environment or Docker cannot give it): it
// looks names up on PATH and starts the server with their paths.
//
// LOCKER_TESTENV=docker or env excludes binaries: the test then skips, even
// under CI, saying so (the run that provisions from binaries covers it).
func dedicatedBinary[S any](t testing.TB, what, install string, names []string, start func(paths []string) (S, func(), error)) S {
	t.Helper()
	if only, err := onlyWay(); err != nil {
		t.Fatalf("testenv: %s: %v", what, err)
	} else if only == viaDocker || only == viaEnv {
		t.Skipf("testenv: %s needs a server binary, which %s=%s excludes", what, EnvTestenv, only)
	}
	return dedicatedServer(t, func() (S, func(), error) {
		paths, err := lookPaths(names...)
		if err != nil {
			var zero S
			return zero, nil, &unavailableError{what: what, install: install, err: err}
		}
		return start(paths)
	})
}

// ownServer returns a server of t's own, which t may restart (its Restart
// method), stopped when t ends: a container or a binary in the package's
// order, never the endpoint of the environment variable, which another
// process may be using. That endpoint stands in only when LOCKER_TESTENV=env
// asks for it, or when neither Docker nor a binary can serve; its Restart
// then fails the test under [CI] and skips it elsewhere.
func ownServer[S any](t testing.TB, src source[S]) S {
	t.Helper()
	return dedicatedServer(t, src.provisionOwn)
}

// dedicatedServer returns a server for t only, stopped when t ends.
func dedicatedServer[S any](t testing.TB, start func() (S, func(), error)) S {
	t.Helper()
	s, stop, err := start()
	if err != nil {
		report(t, err)
	}
	t.Cleanup(stop)
	return s
}
