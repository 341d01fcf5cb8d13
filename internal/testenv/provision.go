package testenv

import (
	"errors"
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

// provision finds a server as the package doc describes.
func (src source[S]) provision() (S, func(), error) {
	if v := os.Getenv(src.env); v != "" {
		return src.fromEnv(v)
	}
	var zero S
	var reasons []string
	if ok, why := dockerStatus(); ok {
		s, stop, err := src.container()
		if err == nil {
			return s, stop, nil
		}
		reasons = append(reasons, "docker: "+err.Error())
	} else {
		reasons = append(reasons, "docker: "+why.Error())
	}
	paths, err := src.binaries()
	if err != nil {
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
func dedicatedBinary[S any](t testing.TB, what, install string, names []string, start func(paths []string) (S, func(), error)) S {
	t.Helper()
	return dedicatedServer(t, func() (S, func(), error) {
		paths, err := lookPaths(names...)
		if err != nil {
			var zero S
			return zero, nil, &unavailableError{what: what, install: install, err: err}
		}
		return start(paths)
	})
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
